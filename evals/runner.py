"""Evaluations: many problems x model tiers x budgeting policies, resumable, into one results store.

Each (problem, tier) runs once under the most generous policy (``fixed`` with the attempt budget);
the other policies, pure stop rules, are derived by replaying that log (``policies_mode="replay"``),
which is how the budgeting study compared them and saves the GPU time of running each one. With
``policies_mode="run"`` every policy runs on its own.

Resume: runs whose summary is stored are skipped; a run killed mid-way starts again with the same
``run_dir``, where the graph keeps its checkpoint, so its finished attempts are not redone.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from evals.environment import collect_environment
from run_vocabulary.budgets import Budget, Spend, budget_stop, is_budget_stop
from run_vocabulary.policies import PolicyError, PolicySettings, parse_policies, parse_policy
from run_vocabulary.records import AttemptRecord, RunSummary
from run_vocabulary.settings import RunSettings
from run_vocabulary.defaults import MAX_ATTEMPTS
from run_vocabulary.variants import DEFAULT_VARIANT, stop_policy

GENEROUS_POLICY = "fixed"
# What must match for a store to be resumed: the same runs with the same budget.
RESUME_KEYS = ("problems", "tiers", "variants", "policies", "policies_mode", "max_attempts")
MEMORY_FILE = "memory.sqlite"  # the evaluation's memory across problems (graph.memory), in its folder


class EvalError(ValueError):
    """An evaluation that cannot start as asked; one-line message."""


class RunNotStarted(Exception):
    """A run that could not start (missing key, unknown tier, a problem whose setup fails): stored as
    failed-to-start and retried on the next invocation."""


NOT_STARTED_PREFIX = f"{RunNotStarted.__name__}: "  # how one_line_error names it across processes
SETUP_FAILED = "setup failed"  # the graph's stop reason for a run that could not start


class RunSpec(RunSettings):
    """One graph run: its settings (``run_vocabulary.settings.RunSettings``; ``policy`` is the evaluation's name of
    the rule with its parameters, ``plateau:w=8``) and everything else a worker (local or on a Ray node) needs, as
    plain data."""

    problem: str = Field(description="the problem's stable key (builtin/gemm_square, L1/12, ...)")
    problem_path: str
    run_dir: str
    problem_error: str = Field("", description="why the problem's setup failed when it was checked: the run "
                               "cannot start")

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The store's key of the run: (problem, tier, policy, variant)."""
        return (self.problem, self.tier, self.policy, self.variant)

    @property
    def label(self) -> str:
        return f"{self.problem} [{self.tier}, {self.variant}, {self.policy}]"


class EvalConfig(BaseModel):
    source: dict[str, Any]  # how the problems were chosen: {"suite": ...} or {"kernelbench": ..., "level": ..., "ids": ...}
    problems: list[str]  # problem keys, in order
    tiers: list[str]
    variants: list[str] = Field(default_factory=lambda: [DEFAULT_VARIANT])
    memory: bool = True  # notes carried across the problems of each (tier, variant)
    policies: list[str]
    policies_mode: Literal["replay", "run"] = "replay"
    max_attempts: int = MAX_ATTEMPTS
    backend: str = "auto"
    executor: str = "local"
    # hard budgets (run_vocabulary.budgets): of each run, and of the whole evaluation (its runs together); None: no cap
    budget_usd: float | None = None
    budget_tokens: int | None = None
    budget_minutes: float | None = None
    eval_budget_usd: float | None = None
    eval_budget_tokens: int | None = None
    eval_budget_minutes: float | None = None

    @property
    def run_budget(self) -> Budget:
        return Budget(self.budget_usd, self.budget_tokens, self.budget_minutes)

    @property
    def eval_budget(self) -> Budget:
        return Budget(self.eval_budget_usd, self.eval_budget_tokens, self.eval_budget_minutes)

    def policies_to_run(self) -> list[str]:
        if self.policies_mode == "run":
            return list(self.policies)
        return [GENEROUS_POLICY]

    def policies_to_derive(self) -> list[str]:
        if self.policies_mode == "run":
            return []
        return [p for p in self.policies if p != GENEROUS_POLICY]

    def policy_settings(self, policy: str | None = None) -> PolicySettings:
        """The stop rule's settings of ``policy`` (a label with parameters): the budget, then its own."""
        base = PolicySettings(max_attempts=self.max_attempts)
        return parse_policy(policy).settings(base) if policy else base

    def run_settings(self, tier: str, variant: str, policy: str, memory_path: str | None) -> RunSettings:
        """The settings of one of the evaluation's runs: the grid's point, with the evaluation's budget and backend."""
        return RunSettings(tier=tier, variant=variant, policy=policy, max_attempts=self.max_attempts,
                           backend=self.backend, memory=memory_path is not None, memory_path=memory_path,
                           # a cap not given falls back on MUCUTLASS_BUDGET_* (run_vocabulary.settings)
                           **{k: v for k, v in budget_fields(self.run_budget).items() if v is not None})


def budget_fields(budget: Budget) -> dict[str, float | int | None]:
    """A budget as a run's settings name it (``budget_usd``, ``budget_tokens``, ``budget_minutes``)."""
    return {"budget_usd": budget.usd, "budget_tokens": budget.tokens, "budget_minutes": budget.minutes}


def spend_of(summary: RunSummary) -> Spend:
    """What a finished run spent: its tokens, dollars and seconds of work over all its resumes."""
    return Spend(summary.tokens_in + summary.tokens_out, summary.cost_usd, summary.work_s)


def check_policies(policies: Sequence[str]) -> list[str]:
    """The policies' canonical labels (``plateau:w=8``); EvalError, one line, for one written wrong."""
    try:
        return [c.label for c in parse_policies(policies)]
    except PolicyError as exc:
        raise EvalError(str(exc)) from None


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", part).strip("_") or "_"


def plan_runs(config: EvalConfig, problem_paths: dict[str, str], out_dir: Path,
              problem_errors: dict[str, str] | None = None) -> list[RunSpec]:
    """Every run the evaluation needs, problem-major so one problem's tiers and variants finish together
    (and the memory of each (tier, variant) holds the earlier problems' notes when the next one starts).
    ``problem_errors``: problems whose setup failed when checked, with why."""
    specs = []
    problem_errors = problem_errors or {}
    memory_path = str((out_dir / MEMORY_FILE).resolve()) if config.memory else None
    for key in config.problems:
        for tier in config.tiers:
            for variant in config.variants:
                for policy in config.policies_to_run():
                    settings = config.run_settings(tier, variant, policy, memory_path)
                    # the default variant keeps the folder layout of evaluations made before variants existed
                    parts = [_safe(key), _safe(tier)] + ([] if variant == DEFAULT_VARIANT else [_safe(variant)])
                    specs.append(RunSpec(
                        **settings.model_dump(), problem=key, problem_path=problem_paths[key],
                        run_dir=str(out_dir.joinpath("runs", *parts, _safe(policy))),
                        problem_error=problem_errors.get(key, ""),
                    ))
    return specs


# ------------------------------------------------------------------------------------------------
# The worker side: plain functions, so the local executor and Ray tasks call the same code.


class RunFn(Protocol):
    """Runs one spec and returns its summary; ``on_event`` gets every finished attempt. The runner
    knows no agent: the command line hands it the graph's run function (``graph.runner:run_spec``),
    tests a fake."""

    def __call__(self, spec: RunSpec, on_event: Callable[[Any], None] | None = None) -> RunSummary: ...


def resolve_run_fn(run_fn: str | RunFn) -> RunFn:
    """``"package.module:function"`` -> the function (workers get the name, not the object)."""
    if callable(run_fn):
        return run_fn
    module_name, _, attr = run_fn.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise EvalError(f"cannot load the run function {run_fn!r}: {exc}") from None


def attempt_from_event(event: Any) -> AttemptRecord | None:
    """The finished attempt an on_event call carries, if any: an AttemptRecord, an event with the
    full record under "attempt" or "record", or an attempt event whose fields are AttemptRecord's."""
    if isinstance(event, AttemptRecord):
        return event
    if not isinstance(event, dict):
        return None
    payload = event.get("record", event.get("attempt"))
    if isinstance(payload, AttemptRecord):
        return payload
    if isinstance(payload, dict):
        return AttemptRecord.model_validate(payload)
    if event.get("event") == "attempt" and "index" in event:
        known = {k: v for k, v in event.items() if k in AttemptRecord.model_fields and v is not None}
        return AttemptRecord.model_validate(known)
    return None


def execute_run(spec: RunSpec, run_fn: str | RunFn, emit_attempt: Callable[[AttemptRecord], None],
                emit_stage: Callable[[str], None] | None = None) -> RunSummary:
    """Run one spec; every finished attempt is passed to ``emit_attempt`` as it arrives, and what the run is
    doing now (a ``stage`` event's text) to ``emit_stage``."""
    if spec.problem_error:  # its setup code never runs again: it failed, or hung, where it was checked
        raise RunNotStarted(f"{SETUP_FAILED}: {spec.problem_error}")
    fn = resolve_run_fn(run_fn)
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)

    def on_event(event: Any) -> None:
        if isinstance(event, dict) and event.get("event") == "stage":
            if emit_stage is not None:
                emit_stage(str(event.get("text", "")))
            return
        attempt = attempt_from_event(event)
        if attempt is not None:
            emit_attempt(attempt)

    summary = fn(spec, on_event=on_event)
    if not isinstance(summary, RunSummary):
        summary = RunSummary.model_validate(summary)
    if summary.stop_reason.startswith(SETUP_FAILED):
        if not summary.attempts:  # nothing to keep: the next invocation starts it afresh, not from this end
            shutil.rmtree(spec.run_dir, ignore_errors=True)
        raise RunNotStarted(summary.stop_reason)
    # The store keys runs by the evaluation's names, whatever the graph called them.
    return summary.model_copy(update={"problem": spec.problem, "tier": spec.tier, "policy": spec.policy,
                                      "variant": spec.variant})


def one_line_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# ------------------------------------------------------------------------------------------------
# The driver side.


class RunSink(Protocol):
    """Where executors report; always called in the driver process."""

    def started(self, spec: RunSpec) -> None: ...
    def attempt(self, spec: RunSpec, attempt: AttemptRecord) -> None: ...
    def finished(self, spec: RunSpec, summary: RunSummary) -> None: ...
    def failed(self, spec: RunSpec, error: str) -> None: ...
    # optional: ``stage(spec, text)``, what a run is doing now (the progress display shows it)


class Executor(Protocol):
    name: str

    def run(self, specs: Sequence[RunSpec], run_fn: str | RunFn, sink: RunSink) -> None: ...


class StoreSink:
    """Writes every report into the store at once, and moves the progress bars."""

    def __init__(self, store, progress=None):
        self.store = store
        self.progress = progress

    def started(self, spec: RunSpec) -> None:
        self.store.start_run(spec.problem, spec.tier, spec.policy, run_dir=spec.run_dir, variant=spec.variant)
        if self.progress:
            self.progress.run_started(spec)

    def attempt(self, spec: RunSpec, attempt: AttemptRecord) -> None:
        self.store.record_attempt(spec.problem, spec.tier, spec.policy, attempt, variant=spec.variant)
        if self.progress:
            self.progress.run_attempt(spec, attempt)

    def stage(self, spec: RunSpec, text: str) -> None:
        if self.progress:
            self.progress.run_stage(spec, text)

    def finished(self, spec: RunSpec, summary: RunSummary) -> None:
        self.store.finish_run(summary)
        if self.progress:
            self.progress.run_finished(spec, ok=True)

    def failed(self, spec: RunSpec, error: str) -> None:
        if error.startswith(NOT_STARTED_PREFIX):
            self.store.fail_run(spec.problem, spec.tier, spec.policy, error.removeprefix(NOT_STARTED_PREFIX),
                                variant=spec.variant, status="failed_to_start")
        else:
            self.store.fail_run(spec.problem, spec.tier, spec.policy, error, variant=spec.variant)
        if self.progress:
            self.progress.run_finished(spec, ok=False)


def _plain(text: str) -> str:
    """``text`` shown as written: a run's label holds brackets, which rich reads as markup otherwise."""
    from rich.markup import escape

    return escape(text)


class EvalProgress:
    """Rich progress bars: one overall, one per run in flight (attempts out of the budget)."""

    def __init__(self, total_runs: int, done_runs: int, console=None):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False,
        )
        self._overall = self._progress.add_task("all runs", total=total_runs, completed=done_runs)
        self._tasks: dict[tuple[str, ...], Any] = {}

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def run_started(self, spec: RunSpec) -> None:
        self._tasks[spec.key] = self._progress.add_task(f"  {_plain(spec.label)}", total=spec.max_attempts)

    def run_attempt(self, spec: RunSpec, attempt: AttemptRecord) -> None:
        task = self._tasks.get(spec.key)
        if task is not None:
            self._progress.update(task, completed=attempt.index)

    def run_stage(self, spec: RunSpec, text: str) -> None:
        task = self._tasks.get(spec.key)
        if task is not None:
            self._progress.update(task, description=f"  {_plain(spec.label)}: {_plain(text)}")

    def run_finished(self, spec: RunSpec, ok: bool) -> None:
        task = self._tasks.pop(spec.key, None)
        if task is not None:
            self._progress.remove_task(task)
        if not ok:
            self._progress.console.print(f"[red]failed[/red] {_plain(spec.label)}")
        self._progress.advance(self._overall)


class EvalOutcome(BaseModel):
    out_dir: str
    resumed: bool
    ran: int  # runs executed in this call
    skipped: int  # runs already finished in the store
    failed: dict[str, str] = Field(default_factory=dict)  # run label -> one-line error
    derived: int = 0  # runs derived by replay
    # runs left unstarted because the evaluation's budget was spent, and the budget's stop reason
    unstarted: list[str] = Field(default_factory=list)
    budget_stop: str = ""
    results_json: str | None = None
    report_md: str | None = None


def derive_policies(store, config: EvalConfig) -> int:
    """Store each derived policy's runs, replayed from the finished logs of the generous policy."""
    from evals.replay import replay_run

    derived = 0
    for log in store.summaries(statuses=("done",)):
        if log.policy != GENEROUS_POLICY:
            continue
        for policy in config.policies_to_derive():
            settings = config.policy_settings(policy)
            # a variant without SOL guidance replays the policy without its SOL test, as it would have run
            cut = replay_run(log, stop_policy(parse_policy(policy).name, log.variant), settings).model_copy(
                update={"policy": policy, "policy_settings": settings.model_dump()})
            store.finish_run(cut, status="derived", derived_from=GENEROUS_POLICY)
            derived += 1
    return derived


def run_evaluation(
    config: EvalConfig,
    problem_paths: dict[str, str],
    out_dir: str | Path,
    *,
    executor: Executor,
    run_fn: str | RunFn,
    environment: dict | None = None,
    show_progress: bool = True,
    write_outputs: bool = True,
    wait: bool = False,
    problem_errors: dict[str, str] | None = None,
) -> EvalOutcome:
    """Run (or resume) an evaluation into ``out_dir/results.sqlite``; then derive policies and write
    the results JSON and the report. The folder is held for this process: another one gets
    ``FolderBusy`` naming the holder, or with ``wait`` blocks until it is free."""
    from evals.locks import FolderLock

    check_policies(config.policies)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise EvalError(f"--out {out}: exists and is not a folder; choose another --out")
    with FolderLock(out, wait=wait):
        return _run_evaluation(config, problem_paths, out, executor, run_fn, environment, show_progress,
                               write_outputs, problem_errors)


def _run_evaluation(config: EvalConfig, problem_paths: dict[str, str], out: Path, executor: Executor,
                    run_fn: str | RunFn, environment: dict | None, show_progress: bool,
                    write_outputs: bool, problem_errors: dict[str, str] | None = None) -> EvalOutcome:
    from evals.store import ResultsStore

    store = ResultsStore(out / "results.sqlite")
    try:
        resumed = store.init_evaluation(
            config.model_dump(), environment if environment is not None else collect_environment(config.backend),
            resume_keys=RESUME_KEYS,
        )
        specs = plan_runs(config, problem_paths, out, problem_errors)
        finished = store.finished_keys() - reopened_by_budgets(store, config)
        todo = [s for s in specs if s.key not in finished]
        progress = EvalProgress(len(specs), len(specs) - len(todo)) if show_progress else None
        sink = StoreSink(store, progress)
        if progress:
            with progress:
                unstarted, why = run_within_budget(config, store, todo, executor, run_fn, sink)
        else:
            unstarted, why = run_within_budget(config, store, todo, executor, run_fn, sink)
        derived = derive_policies(store, config)
        labels = {s.key: s.label for s in specs}
        outcome = EvalOutcome(
            out_dir=str(out), resumed=resumed, ran=len(todo) - len(unstarted), skipped=len(specs) - len(todo),
            failed={labels.get(k, "/".join(k)): e for k, e in store.failures().items()}, derived=derived,
            unstarted=[s.label for s in unstarted], budget_stop=why,
        )
        if write_outputs:
            outcome.results_json = str(write_results_json(store, out / "results.json"))
            from evals.report import write_report

            outcome.report_md = str(write_report(store, out / "report"))
        return outcome
    finally:
        store.close()


def evaluation_spend(store) -> Spend:
    """What the evaluation's live runs have spent together (derived runs are cuts of them: not counted again)."""
    return sum((spend_of(s) for s in store.summaries(statuses=("done",))), Spend())


def run_within_budget(config: EvalConfig, store, todo: Sequence[RunSpec], executor: Executor, run_fn: str | RunFn,
                      sink: RunSink) -> tuple[list[RunSpec], str]:
    """Run ``todo``; under an evaluation budget, in rounds of as many runs as run at once: a round starts only
    while some of the budget is left, and its runs share what is left (each also within its own budget; a run
    resumed keeps what it spent before). Returns the runs left unstarted and the budget's stop reason."""
    budget = config.eval_budget
    if not budget.any:
        executor.run(todo, run_fn, sink)
        return [], ""
    queue, at_once = list(todo), max(1, getattr(executor, "runs_at_once", 1))  # Ray's runs share by rounds of one
    before = {(s.problem, s.tier, s.policy, s.variant): spend_of(s) for s in store.summaries(statuses=("done",))}
    while queue:
        spent = evaluation_spend(store)
        why = budget_stop(spent, budget, "evaluation")
        if why:
            return queue, why
        chunk, queue = queue[:at_once], queue[at_once:]
        share = budget.left(spent).shared(len(chunk))
        # a resumed run's budget counts what it spent before
        runs = [spec.model_copy(update=budget_fields(spec.budget.tighter(share.plus(before.get(spec.key, Spend())))))
                for spec in chunk]
        executor.run(runs, run_fn, sink)
    return [], ""


def reopened_by_budgets(store, config: EvalConfig) -> set[tuple[str, str, str, str]]:
    """Finished runs a budget stopped whose budget is larger now (the per-run one raised, or an evaluation
    budget raised or dropped): they run again from their checkpoint, their attempts kept."""
    now = budget_fields(config.run_budget)
    eval_left = config.eval_budget.any and not budget_stop(evaluation_spend(store), config.eval_budget, "evaluation")
    reopened = set()
    for s in store.summaries(statuses=("done",)):
        if not is_budget_stop(s.stop_reason):
            continue
        raised = any(now[k] is None or now[k] > v for k, v in s.budgets.items())
        if eval_left if config.eval_budget.any else raised:
            reopened.add((s.problem, s.tier, s.policy, s.variant))
    return reopened


def results_document(store) -> dict[str, Any]:
    """The project's results format: date, gpu, versions, rows, summary (headline group) and every group."""
    from evals import metrics

    summaries = store.summaries()
    results = [metrics.result_from_summary(s) for s in summaries]
    env = store.environment()
    config = store.config() or {}
    groups = metrics.by_group(results)

    def group_summary(rs) -> dict[str, Any]:
        g = metrics.group_metrics(rs)
        return {
            "tier": g.tier,
            "variant": g.variant,
            "policy": g.policy,
            **{f"geomean_speedup_vs_{b}": g.geomean_speedup[b] for b in metrics.BASELINES},
            **{f"median_speedup_vs_{b}": g.median_speedup[b] for b in metrics.BASELINES},
            "geomean_sol_fraction": g.geomean_sol_fraction,
            "correct": g.correct,
            "flagged": g.flagged,
            "total": g.total,
            "attempts": g.attempts,
            "tokens": g.tokens,
            "cost_usd": g.cost_usd,
        }

    all_groups = [group_summary(rs) for _, rs in sorted(groups.items())]
    headline = next(
        (s for s in all_groups if s["tier"] == (config.get("tiers") or [None])[0]
         and s["variant"] == (config.get("variants") or [DEFAULT_VARIANT])[0]
         and s["policy"] == (config.get("policies") or [None])[0]),
        all_groups[0] if all_groups else None,
    )
    timing_sources = metrics.timing_sources(summaries)
    rows = []
    for s, r in zip(summaries, results):
        best = s.best
        rows.append({
            "problem": s.problem, "tier": s.tier, "variant": s.variant, "policy": s.policy,
            "correct": r.correct, "flags": r.flags,
            **{f"speedup_vs_{b}": r.speedups.get(b) for b in metrics.BASELINES},
            "sol_fraction": r.sol_fraction, "t_us": s.best_t_us, "t_sol_us": s.t_sol_us,
            "reference_us": s.reference_us, "reference_checks": s.reference_checks, "attempts": r.attempts,
            "tokens": r.tokens, "cost_usd": r.cost_usd,
            "stop_reason": s.stop_reason, "policy_settings": s.policy_settings, "precision": best.precision if best else None,
            "timing_source": best.timing_source if best else None,
        })
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": env.get("gpu"),
        "versions": env.get("versions", {}),
        "environment": env,
        "config": config,
        "timing_sources": timing_sources,
        "derived_policies": store.derived_policies(),
        "rows": rows,
        "variants": [c.model_dump() for c in metrics.variant_cells(summaries)],
        "summary": headline,
        "groups": all_groups,
    }


def write_results_json(store, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(results_document(store), indent=2) + "\n", encoding="utf-8")
    return p
