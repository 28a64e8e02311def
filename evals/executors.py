"""Where an evaluation's runs execute.

- ``LocalExecutor``: one worker per visible GPU (each a process pinned to its GPU through
  CUDA_VISIBLE_DEVICES when it starts, so the judge's processes it starts use that GPU too); problems are
  dealt to the workers round-robin, each with all its runs, and each worker's builds get its share
  of the host's cores (``MUCUTLASS_BUILD_JOBS``); with one worker, or on a CPU machine, runs in this
  process. ``MUCUTLASS_GPU_IDS`` (e.g. ``0,1``) names the devices to spread over.
- ``RayExecutor``: one Ray task per run (in replay mode: per problem and tier), one GPU each when the
  cluster has GPUs; attempts stream back through a Ray queue and results as tasks finish.

Workers never touch the store: they send reports, and the driver writes them (``RunSink``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
from collections.abc import Sequence
from pathlib import Path

from run_vocabulary.records import AttemptRecord, RunSummary
from evals.runner import RunFn, RunSink, RunSpec, execute_run, one_line_error

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def visible_gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _visible_gpu_ids() -> list[str]:
    """The device ids workers may pin to: ``MUCUTLASS_GPU_IDS`` when set, else an outer
    CUDA_VISIBLE_DEVICES, else every device torch sees."""
    named = os.environ.get("MUCUTLASS_GPU_IDS")
    if named:
        return [d.strip() for d in named.split(",") if d.strip()]
    outer = os.environ.get("CUDA_VISIBLE_DEVICES")
    if outer:
        return [d.strip() for d in outer.split(",") if d.strip()]
    return [str(i) for i in range(visible_gpu_count())]


class LocalExecutor:
    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = workers

    @property
    def runs_at_once(self) -> int:
        """How many runs are in flight together: the workers asked for, else one per visible GPU."""
        return self.workers or max(1, len(_visible_gpu_ids()))

    def run(self, specs: Sequence[RunSpec], run_fn: str | RunFn, sink: RunSink) -> None:
        if not specs:
            return
        gpus = _visible_gpu_ids() if self.workers != 1 else []
        workers = self.workers or max(1, len(gpus))
        if workers == 1:
            for spec in specs:
                _run_inline(spec, run_fn, sink)
            return
        if callable(run_fn):
            raise TypeError("several local workers need the run function by name ('module:function')")
        _run_processes(specs, run_fn, sink, workers, gpus)


def _run_inline(spec: RunSpec, run_fn: str | RunFn, sink: RunSink) -> None:
    sink.started(spec)
    stage = getattr(sink, "stage", None)
    try:
        summary = execute_run(spec, run_fn, lambda a: sink.attempt(spec, a),
                              (lambda text: stage(spec, text)) if stage else None)
    except Exception as exc:  # a broken run costs that run only
        sink.failed(spec, one_line_error(exc))
        return
    sink.finished(spec, summary)


def _reported_run(spec_data: dict, run_fn: str, reports) -> tuple[str, object]:
    """One spec in a worker (a local process or a Ray task): its start and attempts go to the driver
    through the ``reports`` queue; returns ("finished", summary) or ("failed", one-line error)."""
    spec = RunSpec.model_validate(spec_data)
    reports.put(("started", spec_data, None))
    try:
        summary = execute_run(spec, run_fn, lambda a: reports.put(("attempt", spec_data, a.model_dump(mode="json"))),
                              lambda text: reports.put(("stage", spec_data, text)))
        return ("finished", summary.model_dump(mode="json"))
    except Exception as exc:
        return ("failed", one_line_error(exc))


def _process_worker(gpu: str | None, run_fn: str, tasks, events, build_jobs: int | None = None) -> None:
    """A local worker process: pinned to one GPU before anything starts CUDA, runs specs until it gets None."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    if build_jobs and not os.environ.get("MUCUTLASS_BUILD_JOBS"):
        os.environ["MUCUTLASS_BUILD_JOBS"] = str(build_jobs)
    while True:
        item = tasks.get()
        if item is None:
            return
        kind, payload = _reported_run(item, run_fn, events)
        events.put((kind, item, payload))


def assign_round_robin(specs: Sequence[RunSpec], workers: int) -> list[list[RunSpec]]:
    """Problems dealt to the workers round-robin in the evaluation's order, each with all its runs (tiers,
    variants, policies): a worker times a problem's references and builds its kernels once, and the same
    evaluation puts each run on the same device."""
    slot: dict[str, int] = {}
    for spec in specs:
        slot.setdefault(spec.problem, len(slot) % workers)
    shares: list[list[RunSpec]] = [[] for _ in range(workers)]
    for spec in specs:
        shares[slot[spec.problem]].append(spec)
    return shares


def _deliver(kind: str, spec: RunSpec, payload, sink: RunSink) -> bool:
    """Pass one worker report to the sink; True when it ends a run."""
    if kind == "started":
        sink.started(spec)
    elif kind == "attempt":
        sink.attempt(spec, AttemptRecord.model_validate(payload))
    elif kind == "stage":
        if hasattr(sink, "stage"):
            sink.stage(spec, payload)
    elif kind == "finished":
        sink.finished(spec, RunSummary.model_validate(payload))
        return True
    elif kind == "failed":
        sink.failed(spec, payload)
        return True
    return False


def _run_processes(specs: Sequence[RunSpec], run_fn: str, sink: RunSink, workers: int, gpus: list[str]) -> None:
    ctx = mp.get_context("spawn")  # a fresh interpreter per worker: CUDA is initialised after pinning
    events = ctx.Queue()
    build_jobs = max(1, (os.cpu_count() or 1) // workers)  # nvcc processes per worker: the cores shared out
    procs, queues = [], []  # the queues live as long as the workers (a started Process drops its args)
    for i, share in enumerate(assign_round_robin(specs, workers)):
        tasks = ctx.Queue()
        queues.append(tasks)
        for spec in share:
            tasks.put(spec.model_dump())
        tasks.put(None)
        gpu = gpus[i % len(gpus)] if gpus else None
        p = ctx.Process(target=_process_worker, args=(gpu, run_fn, tasks, events, build_jobs), daemon=True)
        p.start()
        procs.append(p)
    open_runs = {s.key: s for s in specs}
    try:
        while open_runs:
            try:
                kind, spec_data, payload = events.get(timeout=0.5)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    break
                continue
            spec = RunSpec.model_validate(spec_data)
            if _deliver(kind, spec, payload, sink):
                open_runs.pop(spec.key, None)
        for spec in open_runs.values():  # a worker died without reporting (killed, out of memory)
            sink.failed(spec, "the worker process exited before the run finished")
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=5)


# ------------------------------------------------------------------------------------------------


class RayExecutor:
    """``address``: "local" starts a private Ray instance on this machine; otherwise a cluster address."""

    name = "ray"

    def __init__(self, address: str = "local", num_cpus: int | None = None):
        self.address = address
        self.num_cpus = num_cpus

    def _init(self, ray) -> bool:
        if ray.is_initialized():
            return False
        # Workers import the project from its checkout (same machine, or a shared file system).
        path = [str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env_vars = {"PYTHONPATH": os.pathsep.join(path)}
        for name in ("MUCUTLASS_CACHE_DIR", "MUCUTLASS_BUILD_JOBS", "MUCUTLASS_KERNELS_PER_UNIT"):
            if os.environ.get(name):
                env_vars[name] = os.environ[name]
        if self.address == "local" and not os.environ.get("MUCUTLASS_BUILD_JOBS"):
            # one task per GPU at a time: each task's builds get the host's cores shared out among them
            env_vars["MUCUTLASS_BUILD_JOBS"] = str(max(1, (self.num_cpus or os.cpu_count() or 1) // max(1, visible_gpu_count())))
        runtime_env = {"env_vars": env_vars}
        if self.address == "local":
            ray.init(num_cpus=self.num_cpus or os.cpu_count(), include_dashboard=False,
                     runtime_env=runtime_env, log_to_driver=False)
        else:
            ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False)
        return True

    def run(self, specs: Sequence[RunSpec], run_fn: str | RunFn, sink: RunSink) -> None:
        if not specs:
            return
        if callable(run_fn):
            raise TypeError("Ray tasks need the run function by name ('module:function')")
        import ray
        from ray.util.queue import Queue

        started_here = self._init(ray)
        try:
            gpus = ray.cluster_resources().get("GPU", 0)
            task = ray.remote(num_gpus=1 if gpus else 0, num_cpus=1, max_retries=0)(_reported_run)
            reports = Queue()
            refs = {task.remote(s.model_dump(), run_fn, reports): s for s in specs}
            pending = list(refs)

            def drain() -> None:
                while True:
                    try:
                        kind, spec_data, payload = reports.get_nowait()
                    except queue_mod.Empty:  # ray.util.queue.Empty is a queue.Empty
                        return
                    _deliver(kind, RunSpec.model_validate(spec_data), payload, sink)

            try:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                    drain()
                    for ref in done:
                        spec = refs[ref]
                        try:
                            kind, payload = ray.get(ref)
                        except Exception as exc:  # the task itself died (node lost, worker killed)
                            kind, payload = "failed", one_line_error(exc)
                        _deliver(kind, spec, payload, sink)
            except KeyboardInterrupt:
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
        finally:
            if started_here:
                ray.shutdown()
