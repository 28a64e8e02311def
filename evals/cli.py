"""`mucutlass eval`, `replay` and `report`. Imports nothing heavy until a command runs."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from run_vocabulary.defaults import MAX_ATTEMPTS, PLATEAU_WINDOW, SOL_EPS, TOKEN_BUDGET

BASELINE_CHOICES = ("eager_fp32", "eager_tf32", "compile")


def _csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write numbers separated by commas, like 0.5,1,2.5") from None


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write whole numbers separated by commas, like 4,8,12") from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number above 0 and at most 1, like 0.95")
    return value


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _error(message: str, hint: str | None = None) -> int:
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
    return 1


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0 or value != value or value == float("inf"):
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what} above 0")
        return value

    return parse


def add_budget_arguments(parser, flag: str = "--budget", whose: str = "each run") -> None:
    """The hard budgets (run_vocabulary.budgets) as ``FLAG-usd``, ``FLAG-tokens``, ``FLAG-minutes``; dests
    ``budget_usd`` etc. for a run's, ``eval_budget_usd`` etc. for an evaluation's."""
    dest = flag.lstrip("-").replace("-", "_")
    parser.add_argument(f"{flag}-usd", type=_positive(float), default=None, dest=f"{dest}_usd", metavar="USD",
                        help=f"dollars {whose} may spend on model calls (the tier's prices; offline costs 0)")
    parser.add_argument(f"{flag}-tokens", type=_positive(int), default=None, dest=f"{dest}_tokens", metavar="N",
                        help=f"model tokens (input + output) {whose} may spend")
    parser.add_argument(f"{flag}-minutes", type=_positive(float), default=None, dest=f"{dest}_minutes",
                        metavar="MIN", help=f"minutes of work {whose} may spend (checked between attempts)")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="evaluate problems x tiers x policies into a resumable results store",
        description="Run the graph on every problem under every tier (and policy), resumably. Policies that are "
                    "pure stop rules are derived by replaying the fixed-budget log unless --policies-mode run.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--suite", help="a built-in suite (builtin, builtin-large, builtin-strict, models, smoke)")
    src.add_argument("--kernelbench", metavar="PATH", help="a KernelBench checkout")
    p.add_argument("--level", type=int, help="KernelBench level (with --kernelbench)")
    p.add_argument("--ids", help="KernelBench problem ids, like 1-20,25 (with --kernelbench)")
    p.add_argument("--tiers", type=_csv, default=["offline"], help="model tiers, comma-separated (default: offline)")
    p.add_argument("--policies", type=_csv, default=["fixed", "sol+plateau"],
                   help="budgeting policies, comma-separated, each NAME[:KEY=VALUE]...: sol:eps=2.5, plateau:w=12, "
                        "sol+plateau:eps=1:w=8, tokens:tokens=200000 (default: fixed,sol+plateau, at "
                        f"eps={SOL_EPS:g}, w={PLATEAU_WINDOW}, tokens={TOKEN_BUDGET})")
    p.add_argument("--variants", type=_csv, default=["dsl+sol"],
                   help="agent variants, comma-separated: dsl+sol (default), dsl, cuda, cuda+sol")
    p.add_argument("--no-memory", action="store_true",
                   help="no notes carried across problems (by default each tier and variant keeps one memory)")
    p.add_argument("--policies-mode", choices=("replay", "run"), default="replay",
                   help="replay: run fixed once and derive the others from its log (default); run: run each policy")
    p.add_argument("--tolerance-rule", choices=("default", "kernelbench"), default="default",
                   help="default: each problem's own tolerance; kernelbench: KernelBench's per-dtype rule, fp32 "
                        "problems at 1e-4 and fp16 / bf16 ones at 1e-2 (precisions that cannot meet it dropped)")
    p.add_argument("--max-attempts", type=int, default=MAX_ATTEMPTS, help=f"attempt budget per run (default: {MAX_ATTEMPTS})")
    p.add_argument("--backend", default="auto", choices=("auto", "cutlass", "interpreter"),
                   help="auto: cutlass with a GPU, the interpreter without")
    add_budget_arguments(p, "--budget", "each run")
    add_budget_arguments(p, "--eval-budget", "the whole evaluation (all its runs together; a run starts only "
                                             "while some is left, and gets at most what is left)")
    p.add_argument("--out", default=None, help="evaluation folder (default: runs/eval-<suite or level>)")
    p.add_argument("--ray", metavar="ADDRESS", help="run on Ray: a cluster address, or 'local' for a private instance")
    p.add_argument("--workers", type=int, default=None, help="local workers (default: one per visible GPU)")
    # 'module:function' that runs one spec: the mucutlass command wires the graph's; tests pass a fake
    p.add_argument("--run-fn", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--wait", action="store_true", help="if another process holds --out, wait for it (default: exit 2)")
    p.set_defaults(func=cmd_eval)

    p = subparsers.add_parser(
        "replay", help="re-judge finished logs under other stop rules (no GPU, no model)",
        description="For each policy setting: where each run would have stopped, attempts and tokens saved, "
                    "and the geomean speedup retained, as in the budgeting study.",
    )
    p.add_argument("results", help="an evaluation folder or its results.sqlite")
    p.add_argument("--policies", type=_csv, default=["sol", "plateau", "sol+plateau"],
                   help="policies, comma-separated, as `eval --policies` names them: a bare name is crossed with "
                        "--eps, --w and --token-budget; one with its parameters (sol:eps=1) is one point")
    p.add_argument("--eps", type=_floats, default=[0.5, 1.0, 2.5], help="SOL margins, like 0.5,1,2.5")
    p.add_argument("--w", type=_ints, default=[4, 8, 12], help="plateau windows, like 4,8,12")
    p.add_argument("--token-budget", type=_ints, default=[], help="token budgets for the tokens policy")
    p.add_argument("--baseline", choices=BASELINE_CHOICES, default="eager_fp32")
    p.add_argument("--json", action="store_true", help="print JSON rows in place of the table")
    p.add_argument("--stops", action="store_true", help="also list where each run would have stopped")
    p.set_defaults(func=cmd_replay)

    p = subparsers.add_parser("report", help="write report.md with tables and plots from an evaluation")
    p.add_argument("results", help="an evaluation folder or its results.sqlite")
    p.add_argument("--out", default=None, help="report folder (default: RESULTS/report)")
    p.add_argument("--attempt-p", type=_fraction, default=None, metavar="P",
                   help="Attempt-Fast-p's p: attempt_fast_p.png draws, per policy, the fraction of problems within "
                        "P of their final speedup after n attempts (default: 0.95)")
    p.set_defaults(func=cmd_report)


def cmd_eval(args) -> int:
    from evals.problems import ProblemError, apply_tolerance_rule, load_problems
    from dsl_compiler.backend import resolve_backend
    from evals.locks import FolderBusy, FolderUnusable, make_folder
    from evals.runner import EvalConfig, EvalError, check_policies, run_evaluation
    from evals.store import StoreError

    if args.kernelbench is None and (args.level is not None or args.ids is not None):
        return _error("--level and --ids go with --kernelbench", "add --kernelbench PATH, or drop them")
    if not args.run_fn:
        return _error("no run function to evaluate", "run it as `mucutlass eval`, which hands it the graph's")
    if args.max_attempts < 1:
        return _error(f"--max-attempts {args.max_attempts}: must be at least 1")
    from run_vocabulary.variants import VariantError, check_variants

    try:
        policies = check_policies(args.policies)
    except EvalError as exc:  # a policy written wrong is a usage error, like argparse's
        print(f"error: --policies: {exc}", file=sys.stderr)
        return 2
    try:
        check_variants(args.variants)
    except VariantError as exc:
        return _error(str(exc))
    if not args.tiers:
        return _error("no tiers given", "write e.g. --tiers offline")
    from evals.progress import Status

    try:
        with Status(enabled=not args.no_progress) as status:
            status.show("checking the problems in a child process (their import, Model() and get_inputs())")
            # each checked there first; one whose setup fails is a run that cannot start
            problems = load_problems(suite=args.suite, kernelbench=args.kernelbench, level=args.level, ids=args.ids,
                                     check=True)
            problems = apply_tolerance_rule(problems, args.tolerance_rule)
    except ProblemError as exc:
        return _error(str(exc))
    keys = [p.key for p in problems]
    if len(set(keys)) != len(keys):
        return _error("two problems share a name in this selection", "select them so each name appears once")
    if args.kernelbench is not None:
        source = {"kernelbench": str(Path(args.kernelbench).resolve()), "level": args.level, "ids": args.ids}
        default_out = f"runs/eval-kernelbench-L{args.level}"
    else:
        source = {"suite": args.suite}
        default_out = f"runs/eval-{args.suite}"
    out = Path(args.out or default_out)
    try:
        make_folder(out)
    except FolderUnusable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    backend, _why = resolve_backend(args.backend)
    config = EvalConfig(
        source=source, problems=keys, tiers=args.tiers, variants=args.variants, memory=not args.no_memory,
        policies=policies, policies_mode=args.policies_mode,
        max_attempts=args.max_attempts, backend=backend, executor=f"ray:{args.ray}" if args.ray else "local",
        **{f"{scope}budget_{kind}": getattr(args, f"{scope}budget_{kind}") for scope in ("", "eval_")
           for kind in ("usd", "tokens", "minutes")},
    )
    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            return _error("--ray needs the ray package", "pip install 'mucutlass[ray]'")
        from evals.executors import RayExecutor

        executor = RayExecutor(args.ray)
    else:
        from evals.executors import LocalExecutor

        executor = LocalExecutor(args.workers)
    # A stop by SIGTERM (a job scheduler, `timeout`) ends like Ctrl-C: workers are stopped, and what
    # finished is already in the store, so the same command resumes.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        outcome = run_evaluation(
            config, {p.key: p.path for p in problems}, out, executor=executor,
            run_fn=args.run_fn, show_progress=not args.no_progress, wait=args.wait,
            problem_errors={p.key: p.setup_error for p in problems if p.setup_error},
        )
    except FolderBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (StoreError, EvalError) as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        print(f"interrupted: finished runs are kept in {out}; run the same command to resume", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"{'resumed' if outcome.resumed else 'started'} evaluation in {out}: {outcome.ran} run(s) now, "
          f"{outcome.skipped} already finished, {outcome.derived} derived by replay")
    for label, err in outcome.failed.items():
        print(f"  failed: {label}: {err}")
    if outcome.unstarted:
        print(f"not started: {len(outcome.unstarted)} run(s), {outcome.budget_stop}; raise --eval-budget-* and run "
              "the same command to go on")
    print(f"results: {outcome.results_json}\nreport:  {outcome.report_md}")
    if outcome.failed:
        print(f"error: {len(outcome.failed)} run(s) failed or could not start; run the same command to retry them",
              file=sys.stderr)
        return 1
    return 0


def cmd_replay(args) -> int:
    from evals.replay import ReplayError, policy_grid, replay, replay_table_markdown
    from evals.store import ResultsStore, StoreError
    from run_vocabulary.policies import PolicySettings

    try:
        store = ResultsStore.open_existing(args.results)
    except StoreError as exc:
        return _error(str(exc))
    try:
        logs = [s for s in store.summaries(statuses=("done",)) if s.policy == "fixed"]
        if not logs:
            return _error(f"{args.results}: no finished runs under the fixed policy to replay",
                          "evaluate with --policies including fixed (the default), or let the evaluation finish")
        max_attempts = (store.config() or {}).get("max_attempts")
        base = PolicySettings(max_attempts=max_attempts) if max_attempts else None
        result = replay(logs, policy_grid(args.policies, args.eps, args.w, args.token_budget),
                        baseline=args.baseline, base_settings=base)
    except (ReplayError, StoreError) as exc:
        return _error(str(exc))
    finally:
        store.close()
    if args.json:
        print(json.dumps(result.model_dump(), indent=2))
        return 0
    print(replay_table_markdown(result))
    if args.stops:
        for row in result.rows:
            print(f"\n{row.tier} / {row.variant} / {row.setting.label}:")
            for problem, n in sorted(row.stops.items()):
                print(f"  {problem}: {n} attempts")
    return 0


def cmd_report(args) -> int:
    from evals.report import write_report
    from evals.store import ResultsStore, StoreError

    try:
        store = ResultsStore.open_existing(args.results)
    except StoreError as exc:
        return _error(str(exc))
    try:
        root = Path(args.results)
        out = Path(args.out) if args.out else (root if root.is_dir() else root.parent) / "report"
        if out.exists() and not out.is_dir():
            return _error(f"--out {out}: exists and is not a folder", "choose another --out")
        path = write_report(store, out, *([args.attempt_p] if args.attempt_p is not None else []))
    except StoreError as exc:
        return _error(str(exc))
    finally:
        store.close()
    print(f"report: {path}")
    return 0
