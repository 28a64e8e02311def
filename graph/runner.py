"""Run the graph on one problem and write the run directory.

RUN_DIR/
  run.json            settings of the run, the problem's path and hash, the tier's name (graph.run_record)
  checkpoints.sqlite  LangGraph checkpoints (thread = run id)
  best.mcu            the best program (model_new.py in the cuda variants)
  cutlass/            generated CUTLASS sources of the best program (cutlass backend)
  model_new.py        a drop-in ModelNew module (on the built kernels; on the interpreter for that backend)
  attempts.csv, attempts.json, summary.json
"""

from __future__ import annotations

import csv
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from evals.locks import FolderLock
from graph.checkpoints import CHECKPOINT_FILE, CheckpointError, open_saver, thread_config
from dsl_compiler.backend import resolve_backend
from graph.context import RunContext, Services
from graph.events import EventSink, EventTracker
from run_vocabulary.records import AttemptRecord, RunSummary
from run_vocabulary.budgets import is_budget_stop
from run_vocabulary.settings import BUDGET_FIELDS
from graph.run_record import RUN_FILE, RunError, problem_to_resume, read_record, source_sha256, write_record
from graph.state import initial_state, program_of
from nodes.tiers import TierError, load_tiers, make_tier, tier_identity  # the command line makes its tier here

__all__ = ["RUN_FILE", "RunError", "TierError", "make_tier", "resume_run", "run_optimize", "run_spec"]


def _tier_identity(name: str, tiers_file: str | None) -> str | None:
    try:
        return tier_identity(name, tiers_file)
    except TierError:
        return None


def run_optimize(problem_path: str | Path, ctx: RunContext, run_dir: str | Path, on_event: EventSink | None = None,
                 *, wait: bool = False) -> RunSummary:
    """Optimize one problem; returns its summary and writes the run directory. The directory is held
    for this process (``FolderBusy`` names the holder; ``wait`` blocks until it is free)."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"{run_dir}: exists and is not a folder; choose another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    problem_path = str(Path(problem_path).resolve())
    ctx.run_id = ctx.run_id or uuid.uuid4().hex[:12]
    backend, why = resolve_backend(ctx.backend)
    ctx.backend = backend
    with FolderLock(run_dir, wait=wait):
        write_record(run_dir, {"problem_path": problem_path, "problem_sha256": source_sha256(problem_path),
                               "tier": ctx.tier, "tier_identity": _tier_identity(ctx.tier, ctx.tiers_file),
                               "backend_reason": why, "settings": ctx.settings()})
        return _drive(ctx, run_dir, problem_path, why, initial_state(problem_path, backend), on_event)


def resume_run(run_dir: str | Path, on_event: EventSink | None = None, *, wait: bool = False,
               problem_path: str | Path | None = None, tier: str | None = None, tiers_file: str | None = None,
               memory_path: str | None = None, check_problem: Any = None, budgets: dict[str, Any] | None = None,
               **live: Any) -> RunSummary:
    """Continue a run from its last completed node (finished attempts are not redone).

    The run folder is data (graph.run_record): the problem imported is ``problem_path`` when the caller
    names it (recorded afresh), else the recorded one if this user's seal holds and the file is unchanged;
    the tier is the recorded name (or ``tier``) resolved in the caller's configuration (``tiers_file``).
    ``check_problem(path)`` runs before anything imports the problem (the command line loads it in a child
    process first). ``budgets`` (``budget_usd``, ``budget_tokens``, ``budget_minutes``; None: as recorded) replace
    the recorded ones and are recorded: a run a budget stopped goes on when they allow more, and stops at once
    with the same reason when they do not. ``live`` passes objects that run.json cannot hold (``tier_impl``,
    ``services``)."""
    run_dir = Path(run_dir)
    read_record(run_dir)  # a folder that holds no run is said before waiting for its lock
    emit = on_event or (lambda e: None)
    with FolderLock(run_dir, wait=wait):
        record = read_record(run_dir)
        raised = {k: v for k, v in (budgets or {}).items() if k in BUDGET_FIELDS and v is not None}
        record = {**record, "settings": {**record["settings"], **raised}}
        settings = {**record["settings"], **({"tier": tier} if tier else {})}
        try:
            ctx = RunContext.from_settings(settings, tiers_file=tiers_file, memory_path=memory_path, **live)
        except (ValueError, TypeError) as exc:
            raise RunError(f"{run_dir / RUN_FILE}: unreadable run settings ({type(exc).__name__}: {exc}); "
                           "start the run again with `mucutlass optimize`") from None
        path, sha = problem_to_resume(run_dir, record, problem_path)
        if check_problem is not None:
            emit({"event": "stage", "text": f"checking {Path(path).name} in a child process"})
            check_problem(path)
        if ctx.tier_impl is None and not tier:
            _check_recorded_tier(ctx, record, emit)
        if problem_path is not None or tier or raised:
            write_record(run_dir, {**record, "problem_path": path, "problem_sha256": sha, "tier": ctx.tier,
                                   "tier_identity": _tier_identity(ctx.tier, tiers_file)})
        return _drive(ctx, run_dir, path, record.get("backend_reason", ""), None, on_event,
                      problem_named=problem_path is not None)


def _check_recorded_tier(ctx: RunContext, record: dict, emit: EventSink) -> None:
    """The recorded tier name must be one the user's configuration defines (its endpoint and key are the user's);
    a warning when that definition is not the one the run started with."""
    if not ctx.tier.startswith("playback:") and ctx.tier not in load_tiers(ctx.tiers_file):
        raise TierError(f"this run used tier {ctx.tier!r}, which your tiers configuration does not define; pass "
                        "--tiers-file FILE that defines it (or set MUCUTLASS_TIERS)")
    if record.get("tier_identity") and _tier_identity(ctx.tier, ctx.tiers_file) != record["tier_identity"]:
        emit({"event": "warning", "message": f"tier {ctx.tier!r} is configured differently now than when this run "
                                             "started; its remaining attempts use today's configuration"})


def _drive(ctx: RunContext, run_dir: Path, problem_path: str, backend_reason: str, start_state: dict | None,
           on_event: EventSink | None, problem_named: bool = False) -> RunSummary:
    try:
        return _drive_graph(ctx, run_dir, problem_path, backend_reason, start_state, on_event, problem_named)
    except CheckpointError as exc:  # refused or damaged: nothing of it is used
        raise RunError(f"{exc}; nothing was resumed") from None


# state entries holding paths of kernel libraries and their sources: a checkpoint may only name ones in the cache
_KERNEL_PATHS = ("artifacts", "best_artifacts", "sources", "best_sources")


def _check_checkpointed_state(prior: dict, problem_path: str, problem_named: bool, run_dir: Path) -> dict | None:
    """What a resumed checkpoint must change before it is used (None: nothing): a checkpoint naming another
    problem than the one this resume may import is refused, unless the user named the problem; one naming
    a kernel library outside the kernel cache is refused (the runtime loads what it names)."""
    from dsl_compiler.build import cache_dir

    cache = cache_dir().resolve()
    for key in _KERNEL_PATHS:
        for kernel, path in (prior.get(key) or {}).items():
            if not isinstance(path, str) or not Path(path).resolve().is_relative_to(cache):
                raise CheckpointError(f"names {path!r} for kernel {kernel!r}, outside the kernel cache ({cache}); "
                                      "a checkpoint may only name libraries the cache built")
    if prior.get("problem_path", problem_path) == problem_path:
        return None
    if problem_named:
        return {"problem_path": problem_path}
    raise RunError(f"{run_dir / CHECKPOINT_FILE}: names the problem {prior.get('problem_path')!r}, not the run's "
                   f"{problem_path}; nothing was resumed (to resume with a problem, name it: "
                   f"mucutlass resume {run_dir} --problem PATH)")


def _drive_graph(ctx: RunContext, run_dir: Path, problem_path: str, backend_reason: str, start_state: dict | None,
                 on_event: EventSink | None, problem_named: bool = False) -> RunSummary:
    from graph.builder import build_graph

    emit = on_event or (lambda e: None)
    config = {**thread_config(ctx.run_id), **ctx.langsmith_config(Path(problem_path).stem),
              "recursion_limit": 8 * ctx.max_attempts + 50}
    with open_saver(run_dir) as saver:
        store = None
        if ctx.memory:
            from graph.memory import open_store

            store = open_store(ctx.memory_path)
        graph = build_graph(checkpointer=saver, store=store)
        started = time.perf_counter()  # after imports: they are the process's start-up, not the graph's overhead
        prior = graph.get_state(config).values if start_state is None else {}
        if prior:
            change = _check_checkpointed_state(prior, problem_path, problem_named, run_dir)
            if change:  # the problem the user named, in place of the one the checkpoint holds
                graph.update_state(config, change)
                prior = graph.get_state(config).values
        if start_state is None and not prior:
            start_state = initial_state(problem_path, ctx.backend)  # killed before the first checkpoint
        if prior and is_budget_stop(prior.get("stop_reason", "")):
            prior = _decide_budget_stop_again(graph, config, prior, ctx, emit)
        emit({"event": "start", "problem": Path(problem_path).stem, "tier": ctx.tier, "variant": ctx.variant,
              "policy": ctx.policy, "backend": ctx.backend, "backend_reason": backend_reason, "run_dir": str(run_dir),
              "resumed": bool(prior), "attempts_done": len(prior.get("attempts", []))})
        work_before = prior.get("work_s", 0.0)
        svc = ctx.services
        kinds_before, svc_before = dict(getattr(svc, "work_by_kind_s", {})), getattr(svc, "work_s", 0.0)
        cache_before = dict(getattr(svc, "kernel_cache", {}))

        def progress(state: dict) -> dict:
            loop_s = time.perf_counter() - started
            state_work = state.get("work_s", 0.0) - work_before
            return {"time_split_s": time_split(getattr(svc, "work_by_kind_s", {}), kinds_before, state_work,
                                               getattr(svc, "work_s", 0.0) - svc_before, max(0.0, loop_s - state_work)),
                    "kernel_cache": cache_rate(getattr(svc, "kernel_cache", {}), cache_before)}

        tracker = EventTracker(emit, ctx.max_attempts, prior, progress=progress, tier=ctx.tier, backend=ctx.backend)
        try:
            # durability="sync": each step's checkpoint is on disk before the next step starts, so a
            # killed run never redoes a finished step (a model call, a build) on resume; "tasks" says when a node
            # starts, for the status line
            for mode, chunk in graph.stream(start_state, config, context=ctx, stream_mode=["updates", "tasks"],
                                            durability="sync"):
                if mode == "tasks":
                    if "input" in chunk:  # a node starting (its end comes as an update)
                        tracker.started(chunk["name"])
                    continue
                for node, update in chunk.items():
                    tracker.update(node, update)
            final = graph.get_state(config).values
            loop_s = time.perf_counter() - started
            # the graph's own overhead: the loop's wall time not spent in library calls (model, checks,
            # builds, validation, timing), plus writing the results
            overhead_s = max(0.0, loop_s - (final.get("work_s", 0.0) - work_before))
            summary = summarize(final, ctx, loop_s, overhead_s, backend_reason)
            summary.time_split_s = time_split(getattr(svc, "work_by_kind_s", {}), kinds_before,
                                              final.get("work_s", 0.0) - work_before,
                                              getattr(svc, "work_s", 0.0) - svc_before, overhead_s)
            summary.kernel_cache = cache_rate(getattr(svc, "kernel_cache", {}), cache_before)
            written = write_outputs(final, summary, ctx, run_dir)
        finally:
            if ctx._owns_services:
                ctx.services.close()  # stops the harness worker
    overhead_s = summary.graph_overhead_s
    emit({"event": "done", "run_dir": str(run_dir), "best_index": summary.best_index, "best_t_us": summary.best_t_us,
          "attempts": len(summary.attempts), "tokens": summary.tokens_in + summary.tokens_out,
          "cost_usd": summary.cost_usd, "stop_reason": summary.stop_reason, "graph_overhead_s": overhead_s,
          "model_new_error": written.get("model_new_error")})
    return summary


def _decide_budget_stop_again(graph: Any, config: dict, prior: dict, ctx: RunContext, emit: EventSink) -> dict:
    """A run a budget stopped, resumed: the stop decided again under today's budgets. When they allow more, the
    stop is lifted and the run goes on from the judge's decision (to the planner); else it keeps a stop reason
    and ends at once, its attempts and best as they were."""
    from graph.attempts import stop_decision

    why = stop_decision(prior, ctx)
    if why == prior.get("stop_reason"):
        return prior
    if not why:
        emit({"event": "stage", "text": f"the budgets now allow more than '{prior['stop_reason']}': going on"})
    graph.update_state(config, {"stop_reason": why}, as_node="sol_judge")
    return graph.get_state(config).values


def time_split(kinds_after: dict[str, float], kinds_before: dict[str, float], state_work_s: float, services_work_s: float,
               overhead_s: float) -> dict[str, float]:
    """Where the loop's wall time went: the services' time by kind over the run, the writer's calls (the
    work the state counted beyond the services': a model call, or the offline tier's search) and the
    graph's own overhead."""
    split = {k: round(v - kinds_before.get(k, 0.0), 3) for k, v in kinds_after.items()}
    split = {k: v for k, v in split.items() if v > 0}
    split["model"] = round(max(0.0, state_work_s - services_work_s), 3)
    split["graph"] = round(overhead_s, 3)
    for k in ("build", "validate", "profile"):
        split.setdefault(k, 0.0)
    return split


def cache_rate(after: dict[str, int], before: dict[str, int]) -> dict[str, float]:
    """The kernel cache over one run: kernels asked, found built, the hit rate, kernels built ahead."""
    out = {k: after.get(k, 0) - before.get(k, 0) for k in ("kernels", "hits", "ahead_kernels")}
    out["hit_rate"] = round(out["hits"] / out["kernels"], 4) if out["kernels"] else None
    return out


def summarize(state: dict, ctx: RunContext, wall_s: float, overhead_s: float, backend_reason: str) -> RunSummary:
    from run_vocabulary.floor import kept_result

    try:
        problem = ctx.services.problem(state.get("problem_path", ""))
        allowed, tolerance = getattr(problem, "allowed_precisions", ()), getattr(problem, "tolerance", None)
    except Exception:  # a problem that did not load has no floor beyond its default
        allowed, tolerance = (), None
    checks = state.get("reference_checks") or {}
    kept = kept_result(state.get("best_t_us"), state.get("reference_us", {}), allowed, checks, tolerance)
    return RunSummary(
        fallback=kept.source if kept.fallback else "", kept_t_us=kept.t_us,
        problem=state.get("problem_name") or Path(state.get("problem_path", "")).stem,
        tier=ctx.tier, policy=ctx.policy, variant=ctx.variant, backend=ctx.backend, gpu=ctx.gpu,
        attempts=[AttemptRecord.model_validate(a) for a in state.get("attempts", [])],
        best_index=state.get("best_index"), best_t_us=state.get("best_t_us"),
        t_sol_us=state.get("sol", {}).get("t_sol_us"), reference_us=state.get("reference_us", {}),
        reference_checks=checks,
        stop_reason=state.get("stop_reason", ""), policy_settings=ctx.policy_settings.model_dump(), tokens_in=state.get("tokens_in", 0),
        tokens_out=state.get("tokens_out", 0), cost_usd=state.get("cost_usd", 0.0), wall_s=wall_s,
        work_s=state.get("work_s", 0.0),
        tokens_by_model=state.get("tokens_by_model", {}), spend_by_node=state.get("spend_by_node", {}),
        budgets={k: v for k in BUDGET_FIELDS for v in [getattr(ctx, k)] if v is not None},
        graph_overhead_s=overhead_s,
        backend_reason=backend_reason, run_id=ctx.run_id,
    )


ATTEMPT_COLUMNS = [
    "index", "hypothesis", "reached", "compile_ok", "correct", "failure_reason", "t_us", "t_spread_pct",
    "timing_source", "t_sol_us", "sol_fraction", "speedup_vs_eager_fp32", "speedup_vs_eager_tf32",
    "speedup_vs_compile", "precision", "max_abs_error", "flags", "tokens_in", "tokens_out", "cost_usd", "build_s",
    "wall_s", "improved", "program_hash",
]


def write_outputs(state: dict, summary: RunSummary, ctx: RunContext, run_dir: Path) -> dict[str, Any]:
    """Write the run directory; the time it takes is added to ``summary.graph_overhead_s``. Returns summary.json's
    data."""
    start = time.perf_counter()
    rows = [a.model_dump() for a in summary.attempts]
    (run_dir / "attempts.json").write_text(json.dumps(rows, indent=2))
    with open(run_dir / "attempts.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=ATTEMPT_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, "flags": "; ".join(r["flags"])})
    data = summary.model_dump(exclude={"attempts"})
    data["attempts"] = len(summary.attempts)
    data["headroom"] = (summary.best_t_us / summary.t_sol_us) if (summary.best_t_us and summary.t_sol_us) else None
    best_text = state.get("best_program_text")
    python = ctx.variant_spec.language == "python"
    if best_text:
        name = "model_new.py" if python else "best.mcu"  # a cuda variant's best is a drop-in ModelNew already
        (run_dir / name).write_text(best_text)
        data["best_program"] = name
    artifacts = state.get("best_artifacts") or {}
    sources = state.get("best_sources") or {}
    if sources:
        data["cutlass_sources"] = _copy_sources(sources, run_dir / "cutlass")
    program = program_of(state, "best_program")
    if best_text and not python and program is not None:
        try:
            source = Path(state["problem_path"]).read_text() if Path(state["problem_path"]).is_file() else None
            if ctx.backend == "cutlass":
                ctx.services.export_model_new(program, artifacts, str(run_dir / "model_new.py"), problem_source=source)
            else:  # no kernels were built: the ModelNew runs the program on the interpreter
                ctx.services.export_model_interpreted(program, str(run_dir / "model_new.py"), problem_source=source)
            data["model_new"] = "model_new.py"
        except Exception as exc:  # the run's results stand without the export; say why it is missing
            data["model_new_error"] = f"{type(exc).__name__}: {exc}"
    elif python and best_text:
        data["model_new"] = "model_new.py"
    elif not best_text:
        data["model_new_error"] = "no attempt was correct, so there is no program to export"
    summary.graph_overhead_s += time.perf_counter() - start
    summary.wall_s += time.perf_counter() - start
    data["graph_overhead_s"], data["wall_s"] = summary.graph_overhead_s, summary.wall_s
    (run_dir / "summary.json").write_text(json.dumps(data, indent=2, default=str))
    return data


def _copy_sources(sources: dict[str, str], dest: Path) -> list[str]:
    """The generated CUTLASS sources of the best program (one per kernel, named after it)."""
    copied = []
    for kernel, src in sources.items():
        src_path = Path(src)
        if src_path.is_file():
            dest.mkdir(exist_ok=True)
            name = f"{kernel}{src_path.suffix}"
            shutil.copy2(src_path, dest / name)
            copied.append(f"cutlass/{name}")
    return copied


# ---------------------------------------------------------------------------------------------
# The graph as an evaluation's run function (the command line hands it to ``evals.runner``)

_SHARED_SERVICES: dict[str, Any] = {}


def shared_services(gpu: str = "h200") -> Services:
    """One set of graph services (and so one harness worker) per evaluation process, reused by every
    run it executes: starting a worker costs seconds (torch import, CUDA context) per problem otherwise."""
    if gpu not in _SHARED_SERVICES:
        import atexit

        _SHARED_SERVICES[gpu] = services = Services(gpu=gpu)
        atexit.register(services.close)
    return _SHARED_SERVICES[gpu]


def run_spec(spec: Any, on_event: EventSink | None = None) -> RunSummary:
    """One evaluation run (an ``evals.runner.RunSpec``) through the graph; a run directory left by a
    killed run is resumed from its checkpoint, so the attempts it finished are not redone."""
    services = shared_services()
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    if (Path(spec.run_dir) / RUN_FILE).is_file():  # the evaluation's command names the problem, tier and memory
        return resume_run(spec.run_dir, on_event, services=services, problem_path=spec.problem_path, tier=spec.tier,
                          memory_path=spec.memory_path, budgets={k: getattr(spec, k) for k in BUDGET_FIELDS})
    ctx = RunContext(**spec.run_settings().model_dump(), services=services)
    return run_optimize(spec.problem_path, ctx, spec.run_dir, on_event)

