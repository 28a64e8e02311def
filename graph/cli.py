"""`mucutlass optimize` and `mucutlass resume`. Imports nothing heavy until a command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from run_vocabulary.defaults import MAX_ATTEMPTS, PLATEAU_WINDOW, SOL_EPS, TOKEN_BUDGET

POLICIES = ("fixed", "sol", "plateau", "sol+plateau", "tokens")  # run_vocabulary.policies.POLICY_NAMES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "optimize", help="optimize one PyTorch problem with μCUTLASS kernels",
        description="Run the planner -> writer -> compiler -> validator -> profiler -> judge loop on one "
                    "KernelBench-format problem and write the run directory (best.mcu, CUTLASS sources, "
                    "model_new.py, attempts.csv/json, summary.json).",
    )
    p.add_argument("problem", nargs="?", default=None,
                   help="a KernelBench-format problem file (Model, get_inputs, get_init_inputs); default: a built-in "
                        "Linear + ReLU problem (its full size on a GPU, a tiny one on a machine without one)")
    p.add_argument("--tier", default="offline",
                   help="model tier from the tiers file, or playback:DIR to replay .mcu files (default: offline)")
    p.add_argument("--tiers-file", default=None, help="extra tiers TOML (also MUCUTLASS_TIERS)")
    p.add_argument("--variant", "--variants", default=None, dest="variant", metavar="VARIANT",
                   help="dsl+sol (the default), dsl (no SOL guidance), cuda (a ModelNew with its own CUDA kernels) "
                        "or cuda+sol")
    p.add_argument("--memory", action="store_true",
                   help="keep notes of each attempt in a memory the writer reads (in-process; eval keeps one per folder)")
    p.add_argument("--policy", default="sol+plateau", choices=POLICIES, help="when to stop (default: sol+plateau)")
    p.add_argument("--max-attempts", type=int, default=MAX_ATTEMPTS,
                   help=f"attempt cap for every policy (default: {MAX_ATTEMPTS})")
    p.add_argument("--eps", type=float, default=SOL_EPS,
                   help=f"sol policy: stop at t_best <= (1 + eps) t_SOL (default: {SOL_EPS:g})")
    p.add_argument("--plateau", type=int, default=PLATEAU_WINDOW, dest="plateau_window",
                   help=f"plateau policy: attempts in a row without gain (default: {PLATEAU_WINDOW})")
    p.add_argument("--token-budget", type=int, default=TOKEN_BUDGET, help=f"tokens policy: budget (default: {TOKEN_BUDGET})")
    from evals.cli import add_budget_arguments

    add_budget_arguments(p, "--budget", "the run")
    p.add_argument("--backend", default="auto", choices=("cutlass", "interpreter", "auto"),
                   help="auto: cutlass when a GPU and nvcc are present, else interpreter (default: auto)")
    p.add_argument("--gpu", default="h200", help="GPU of the SOL model (default: h200)")
    p.add_argument("--out", default=None, help="run directory (default: runs/<problem>-<time>)")
    p.add_argument("--json", action="store_true", help="print events as JSON lines on stdout")
    p.add_argument("--wait", action="store_true", help="if another process holds --out, wait for it (default: exit 2)")
    p.set_defaults(func=_with_sink(optimize_command))

    r = subparsers.add_parser("resume", help="continue a killed optimize run from its last completed step",
                              description="Continue a run from RUN_DIR/checkpoints.sqlite; finished attempts are kept. "
                                          "A run folder is data: the problem it names is imported only if this user's "
                                          "run recorded it and the file is unchanged (else name it with --problem), "
                                          "and its tier is looked up by name in your own tiers configuration.")
    r.add_argument("run_dir", help="the run directory of `mucutlass optimize`")
    r.add_argument("--problem", default=None, metavar="PATH",
                   help="the problem to resume with (needed when the recorded one changed, moved, or the folder is not "
                        "from a run of yours); recorded afresh")
    r.add_argument("--tiers-file", default=None, help="tiers TOML defining the run's tier (also MUCUTLASS_TIERS)")
    add_budget_arguments(r, "--budget", "the run (in place of the recorded one: a run a budget stopped goes on "
                                        "when it allows more)")
    r.add_argument("--json", action="store_true", help="print events as JSON lines on stdout")
    r.add_argument("--wait", action="store_true", help="if another process holds RUN_DIR, wait for it (default: exit 2)")
    r.set_defaults(func=_with_sink(resume_command))


def _sink(as_json: bool):
    from graph.events import json_lines, rich_printer

    return json_lines(sys.stdout) if as_json else rich_printer()


def _with_sink(command):
    """Run ``command(args, sink)`` with the events' sink of ``--json``, its status line cleared at the end."""
    def run(args: argparse.Namespace) -> int:
        sink = _sink(args.json)
        try:
            return command(args, sink)
        finally:
            getattr(sink, "close", lambda: None)()

    return run


def _stage(sink, text: str) -> None:
    sink({"event": "stage", "text": text})


def _error(msg: str, code: int) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


# The built-in default problem: full size where kernels can run, tiny where the interpreter stands in.
DEFAULT_PROBLEM_GPU = ("builtin", "11_linear_relu.py")
DEFAULT_PROBLEM_CPU = ("smoke", "02_linear_relu_tiny.py")


def default_problem() -> tuple[Path, str]:
    """The problem `mucutlass optimize` runs when none is named, and why that one."""
    from evals.problems import SUITES_DIR
    from dsl_compiler.backend import resolve_backend

    backend, reason = resolve_backend("auto")
    suite, name = DEFAULT_PROBLEM_GPU if backend == "cutlass" else DEFAULT_PROBLEM_CPU
    return SUITES_DIR / suite / name, f"no problem named: the built-in {suite}/{name} ({reason})"


def optimize_command(args: argparse.Namespace, sink) -> int:
    named = Path(args.problem) if args.problem is not None else None
    if named is not None and not named.is_file():
        return _error(f"{named}: no such problem file", 1)
    if args.max_attempts < 1:
        return _error("--max-attempts must be at least 1", 2)
    from graph.context import Services

    services = Services(gpu=args.gpu)
    services.start_harness()  # the judge's start-up (torch's import, its fork server's) overlaps the set-up below
    try:
        return _optimize(args, sink, named, services)
    finally:
        services.close()


def _optimize(args: argparse.Namespace, sink, problem: Path | None, services) -> int:
    if problem is None:
        _stage(sink, "looking for a GPU and nvcc (importing PyTorch)")
        problem, why = default_problem()
        print(why, file=sys.stderr)
    from graph.context import RunContext
    from graph.runner import TierError, make_tier, run_optimize

    if args.tier.startswith("playback:"):  # absolute, so `resume` finds the files from any directory
        args.tier = "playback:" + str(Path(args.tier.split(":", 1)[1]).resolve())
    if args.tiers_file:
        args.tiers_file = str(Path(args.tiers_file).resolve())
    _stage(sink, f"setting up the {args.tier} tier")
    try:
        tier = make_tier(args.tier, args.tiers_file)
    except TierError as exc:
        return _error(str(exc), 1)
    out = Path(args.out) if args.out else Path("runs") / f"{problem.stem}-{_stamp()}"
    if out.exists() and not out.is_dir():
        return _error(f"--out {out}: exists and is not a folder; choose another --out", 2)
    if (out / "run.json").exists():
        return _error(f"{out} already holds a run; continue it with `mucutlass resume {out}` or choose another --out", 2)
    from run_vocabulary.variants import DEFAULT_VARIANT, VariantError, get_variant

    try:
        variant = get_variant(args.variant or DEFAULT_VARIANT).name
    except VariantError as exc:
        return _error(str(exc), 2)
    from evals.locks import FolderUnusable, make_folder

    created = not out.exists()
    try:
        make_folder(out)
    except FolderUnusable as exc:
        return _error(str(exc), 2)
    from evals.problems import ProblemError, check_problem

    _stage(sink, f"checking {problem.name} in a child process (its import, Model() and get_inputs())")
    try:  # its calls in a child process first: one that ignores the time limit is stopped there
        check_problem(problem)
    except ProblemError as exc:
        _discard_unstarted(out, created)
        return _error(str(exc), 1)
    _stage(sink, "starting the graph")
    ctx = RunContext(tier=args.tier, policy=args.policy, variant=variant, memory=args.memory,
                     max_attempts=args.max_attempts, eps=args.eps, plateau_window=args.plateau_window, token_budget=args.token_budget, backend=args.backend,
                     gpu=args.gpu, tiers_file=args.tiers_file, tier_impl=tier, services=services,
                     **_budgets(args))
    from evals.locks import FolderBusy
    from graph.runner import RunError

    try:
        summary = run_optimize(problem, ctx, out, on_event=sink, wait=args.wait)
    except FolderBusy as exc:
        return _error(str(exc), 2)
    except RunError as exc:
        return _error(str(exc), 1)
    except KeyboardInterrupt:
        print(f"interrupted: continue with `mucutlass resume {out}`", file=sys.stderr)
        raise
    except BaseException:
        _discard_unstarted(out, created)
        raise
    if not summary.attempts and summary.stop_reason.startswith("setup failed"):
        _discard_unstarted(out, created)  # a run that never started leaves no folder behind
    return _outcome(summary)


def _discard_unstarted(out: Path, created: bool) -> None:
    """Remove a run directory this command created when no attempt was recorded in it."""
    import json
    import shutil

    if not created or not out.is_dir():
        return
    try:
        attempts = json.loads((out / "attempts.json").read_text())
    except (OSError, ValueError):
        attempts = []
    if not attempts:
        shutil.rmtree(out, ignore_errors=True)


def resume_command(args: argparse.Namespace, sink) -> int:
    from evals.locks import FolderBusy
    from evals.problems import ProblemError, check_problem
    from graph.runner import RunError, TierError, resume_run

    tiers_file = str(Path(args.tiers_file).resolve()) if args.tiers_file else None
    try:
        _stage(sink, f"reading {args.run_dir}")
        summary = resume_run(args.run_dir, on_event=sink, wait=args.wait, problem_path=args.problem,
                             tiers_file=tiers_file, check_problem=check_problem, budgets=_budgets(args))
    except FolderBusy as exc:
        return _error(str(exc), 2)
    except (RunError, TierError, ProblemError) as exc:
        return _error(str(exc), 1)
    return _outcome(summary)


def _budgets(args: argparse.Namespace) -> dict:
    """The budgets the command line names (the others fall back on MUCUTLASS_BUDGET_*, or none)."""
    from run_vocabulary.settings import BUDGET_FIELDS

    return {k: getattr(args, k) for k in BUDGET_FIELDS if getattr(args, k, None) is not None}


def _outcome(summary) -> int:
    if summary.stop_reason.startswith("setup failed"):
        return _error(summary.stop_reason, 1)
    return 0


def _stamp() -> str:
    import time

    return time.strftime("%Y%m%d-%H%M%S")
