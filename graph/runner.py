"""Run the graph on one problem and write the run directory.

RUN_DIR/
  run.json            settings of the run (restored by ``resume``)
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
from graph.checkpoints import CheckpointError, open_saver, thread_config
from dsl_compiler.backend import resolve_backend
from graph.context import RunContext, Services
from graph.events import EventSink, EventTracker
from evals.records import AttemptRecord, RunSummary
from graph.state import initial_state, program_of
from nodes.tiers import TierError, make_tier  # noqa: F401 -- the command line makes its tier here

RUN_FILE = "run.json"


class RunError(Exception):
    """A run cannot start or resume (missing run directory, unreadable run.json): one line."""


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
        (run_dir / RUN_FILE).write_text(json.dumps(
            {"problem_path": problem_path, "backend_reason": why, "settings": ctx.settings()}, indent=2))
        return _drive(ctx, run_dir, problem_path, why, initial_state(problem_path, backend), on_event)


def resume_run(run_dir: str | Path, on_event: EventSink | None = None, *, wait: bool = False,
               **live: Any) -> RunSummary:
    """Continue a run from its last completed node (finished attempts are not redone). ``live``
    passes objects that run.json cannot hold (``tier_impl``, ``services``)."""
    run_dir = Path(run_dir)
    meta_path = run_dir / RUN_FILE
    if not meta_path.is_file():
        raise RunError(f"{run_dir}: not a run directory (no {RUN_FILE})")
    with FolderLock(run_dir, wait=wait):
        try:
            meta = json.loads(meta_path.read_text())
            ctx = RunContext.from_settings(meta["settings"], **live)
            problem_path = meta["problem_path"]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RunError(f"{meta_path}: unreadable run settings ({type(exc).__name__}: {exc}); "
                           "start the run again with `mucutlass optimize`") from None
        return _drive(ctx, run_dir, problem_path, meta.get("backend_reason", ""), None, on_event)


def _drive(ctx: RunContext, run_dir: Path, problem_path: str, backend_reason: str, start_state: dict | None,
           on_event: EventSink | None) -> RunSummary:
    try:
        return _drive_graph(ctx, run_dir, problem_path, backend_reason, start_state, on_event)
    except CheckpointError as exc:  # refused or damaged: nothing of it is used
        raise RunError(f"{exc}; nothing was resumed") from None


def _drive_graph(ctx: RunContext, run_dir: Path, problem_path: str, backend_reason: str, start_state: dict | None,
                 on_event: EventSink | None) -> RunSummary:
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
        if start_state is None and not prior:
            start_state = initial_state(problem_path, ctx.backend)  # killed before the first checkpoint
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

        tracker = EventTracker(emit, ctx.max_attempts, prior, progress=progress)
        try:
            # durability="sync": each step's checkpoint is on disk before the next step starts, so a
            # killed run never redoes a finished step (a model call, a build) on resume
            for chunk in graph.stream(start_state, config, context=ctx, stream_mode="updates", durability="sync"):
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
    from evals.floor import kept_result

    try:
        allowed = getattr(ctx.services.problem(state.get("problem_path", "")), "allowed_precisions", ())
    except Exception:  # a problem that did not load has no floor beyond its default
        allowed = ()
    kept = kept_result(state.get("best_t_us"), state.get("reference_us", {}), allowed)
    return RunSummary(
        fallback=kept.source if kept.fallback else "", kept_t_us=kept.t_us,
        problem=state.get("problem_name") or Path(state.get("problem_path", "")).stem,
        tier=ctx.tier, policy=ctx.policy, variant=ctx.variant, backend=ctx.backend, gpu=ctx.gpu,
        attempts=[AttemptRecord.model_validate(a) for a in state.get("attempts", [])],
        best_index=state.get("best_index"), best_t_us=state.get("best_t_us"),
        t_sol_us=state.get("sol", {}).get("t_sol_us"), reference_us=state.get("reference_us", {}),
        stop_reason=state.get("stop_reason", ""), tokens_in=state.get("tokens_in", 0),
        tokens_out=state.get("tokens_out", 0), cost_usd=state.get("cost_usd", 0.0), wall_s=wall_s,
        tokens_by_model=state.get("tokens_by_model", {}), graph_overhead_s=overhead_s,
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
    if (Path(spec.run_dir) / RUN_FILE).is_file():
        return resume_run(spec.run_dir, on_event, services=services)
    ctx = RunContext(tier=spec.tier, policy=spec.policy, variant=spec.variant, max_attempts=spec.max_attempts,
                     backend=spec.backend, memory=spec.memory_path is not None, memory_path=spec.memory_path,
                     services=services)
    return run_optimize(spec.problem_path, ctx, spec.run_dir, on_event)

