"""The candidate process: runs one candidate's code and returns raw outputs to the judge.

Started ahead of need by the judge (``evals.judge.sandbox``) under a supervisor, in an empty temporary
directory that is not on its import path, with secrets removed from its environment. It speaks
only on the socket whose descriptor it is given (``evals.judge.wire``); stdout and stderr are a log.
It never holds the reference model, the input seeds, the expected outputs or the verdict: it gets the
constructor arguments, a parameter seed (or, for a μCUTLASS program, the reference's parameters) and
input tensors, and answers with output tensors and what it observed. Only a program with ``module``
steps is also given the problem's source, to build its own ``Model`` holding the reference's parameters
whose submodules those steps call (a program is data: it names submodules and brings no Python of its own).

Everything this process reports is a claim: the judge compares outputs itself, keeps its own copy
of every input, and bounds the reported GPU time by its own wall clock. The checks made here (plain
tensor types, aliasing, framework state, kernel attribution) use references taken before the
candidate's code is imported, which stops a candidate that patches torch's functions but not one
that rewrites this module's memory (see docs/harness.md).
"""

from __future__ import annotations

# First, before anything of the candidate's or torch's can run: other processes of this user (a
# candidate in the previous or next attempt's process) cannot read or write this one's memory or
# environment through /proc/<pid>/mem, environ or ptrace.
import ctypes

ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4

import sys  # noqa: E402

if "--armed-fd" in sys.argv[:-1]:  # closed now: the judge lets no candidate code run beside a process not yet undumpable
    import os

    os.close(int(sys.argv[sys.argv.index("--armed-fd") + 1]))

import argparse
import builtins
import contextlib
import gc
import os
import socket
import sys
import threading
import time
import traceback
import types

import statistics

import torch
import torch.profiler
import torch.utils._python_dispatch
import torch.utils.flop_counter

from evals.judge import attribution, compare, memory, sealed, timing, wire

# Taken before any candidate code runs: what the checks below use.
_type = builtins.type
_Tensor = torch.Tensor
_perf = time.perf_counter
_cuda_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_CUDAGraph = torch.cuda.CUDAGraph
_strided = torch.strided
_GUARDED = {
    "torch.cuda.synchronize": (torch.cuda, "synchronize"), "torch.cuda.Event": (torch.cuda, "Event"),
    "torch.cuda.Event.record": (torch.cuda.Event, "record"),
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time"),
    "torch.cuda.CUDAGraph.replay": (torch.cuda.CUDAGraph, "replay"), "time.perf_counter": (time, "perf_counter"),
    "torch.cuda.current_stream": (torch.cuda, "current_stream"), "torch.Tensor.copy_": (torch.Tensor, "copy_"),
    "torch.Tensor.fill_": (torch.Tensor, "fill_"), "torch.save": (torch, "save"),
    "torch.nn.Module.__call__": (torch.nn.Module, "__call__"),
    # what captures and replays the timed graphs
    "torch.cuda.graph": (torch.cuda, "graph"), "torch.cuda.CUDAGraph": (torch.cuda, "CUDAGraph"),
    "torch.cuda.Stream": (torch.cuda, "Stream"), "torch.cuda.stream": (torch.cuda, "stream"),
    "torch.cuda.CUDAGraph.capture_begin": (torch.cuda.CUDAGraph, "capture_begin"),
    "torch.cuda.CUDAGraph.capture_end": (torch.cuda.CUDAGraph, "capture_end"),
    # what copies outputs and inputs back to the judge
    "torch.Tensor.to": (torch.Tensor, "to"), "torch.Tensor.detach": (torch.Tensor, "detach"),
    "torch.Tensor.clone": (torch.Tensor, "clone"), "torch.Tensor.cpu": (torch.Tensor, "cpu"),
    "torch.Tensor.contiguous": (torch.Tensor, "contiguous"), "torch.Tensor.view": (torch.Tensor, "view"),
    "torch.frombuffer": (torch, "frombuffer"), "torch.load": (torch, "load"),
    # what the aliasing checks read storage addresses with (_storage_range)
    "torch.Tensor.untyped_storage": (torch.Tensor, "untyped_storage"),
    "torch.UntypedStorage.data_ptr": (torch.UntypedStorage, "data_ptr"),
    "torch.UntypedStorage.nbytes": (torch.UntypedStorage, "nbytes"),
    # what tells a storage the candidate still holds from one let go (earlier_alive)
    "torch.UntypedStorage._weak_ref": (torch.UntypedStorage, "_weak_ref"),
    "torch.UntypedStorage._expired": (torch.UntypedStorage, "_expired"),
    "torch.UntypedStorage._free_weak_ref": (torch.UntypedStorage, "_free_weak_ref"),
    # what measures the work (Runner.counted)
    "torch.utils.flop_counter.FlopCounterMode": (torch.utils.flop_counter, "FlopCounterMode"),
    "torch.utils.flop_counter.FlopCounterMode.get_total_flops": (torch.utils.flop_counter.FlopCounterMode,
                                                                 "get_total_flops"),
    "torch.profiler.profile": (torch.profiler, "profile"),
    "torch.utils._python_dispatch._disable_current_modes": (torch.utils._python_dispatch, "_disable_current_modes"),
    # what says where an operator's kernel was registered (compiled code or Python: Runner.counted)
    "torch._C._dispatch_dump": (torch._C, "_dispatch_dump"),
}
# the C entry points underneath (torch.cuda.synchronize calls torch._C._cuda_synchronize when it runs)
for _name in ("_cuda_synchronize", "_cuda_getCurrentStream", "_cuda_setStream"):
    if hasattr(torch._C, _name):
        _GUARDED[f"torch._C.{_name}"] = (torch._C, _name)
_ORIGINALS = {name: getattr(owner, attr) for name, (owner, attr) in _GUARDED.items()}
# torch's own operator namespaces, read before any code of the candidate's is loaded
_TORCH_NAMESPACES = attribution.library_namespaces()
_sleep = time.sleep


_EMPTY_CELL = object()


def _function_state(fn) -> tuple:
    """What a Python function runs with besides its identity: its code, its defaults (positional and keyword,
    the latter a dict changed in place as easily as replaced) and what its closure cells hold."""
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            cells.append(_EMPTY_CELL)
    kw = fn.__kwdefaults__
    return fn.__code__, fn.__defaults__, kw, (dict(kw) if kw is not None else None), tuple(cells)


def _state_changed(fn, state: tuple) -> bool:
    code, defaults, kw, kw_items, cells = state
    if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kw:
        return True
    if kw is not None and (kw.keys() != kw_items.keys() or any(kw[k] is not v for k, v in kw_items.items())):
        return True
    now = _function_state(fn)[4]
    return len(now) != len(cells) or any(a is not b for a, b in zip(now, cells))


def _restore_state(fn, state: tuple) -> None:
    code, defaults, kw, kw_items, cells = state
    fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kw
    if kw is not None:
        kw.clear()
        kw.update(kw_items)
    for cell, value in zip(fn.__closure__ or (), cells):
        if value is _EMPTY_CELL:
            continue
        cell.cell_contents = value


def _functions_of(value) -> list:
    """The Python functions a class attribute or a module binding runs: a function, a static or class method's,
    a property's accessors."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
    return [value] if isinstance(value, types.FunctionType) else []


def _bound(value) -> bool:
    """A binding whose replacement changes what runs: anything callable, and the descriptors of a class."""
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


def _class_members(cls, out: dict, seen: set) -> None:
    for klass in cls.__mro__:
        if klass is object or id(klass) in seen:
            continue
        seen.add(id(klass))
        for attr, value in list(vars(klass).items()):
            if _bound(value) and attr not in ("__class__", "__doc__"):
                out[(klass, attr)] = (value, [(f, _function_state(f)) for f in _functions_of(value)])


def _module_functions(*modules, defined_only: bool = False) -> dict:
    """(owner, name) -> (the bound object, [(each function it runs, that function's code, defaults and closure)])
    for every callable binding of ``modules`` and every attribute of the classes they define: the harness's own
    modules here, and the machinery that records the candidate's work (the profiler, its event parsing, the FLOP
    counter). Replaced, or a function's code, defaults or closure swapped, they would measure or report for the
    candidate. ``defined_only``: only what each module defines itself (its imports are other modules' to guard)."""
    out: dict = {}
    seen: set = set()
    for mod in modules:
        for name, obj in list(vars(mod).items()):
            if not _bound(obj) or isinstance(obj, types.ModuleType):
                continue
            home = getattr(obj, "__module__", None)
            if defined_only and home != mod.__name__:
                continue
            out[(mod, name)] = (obj, [(f, _function_state(f)) for f in _functions_of(obj)])
            if isinstance(obj, type) and (home == mod.__name__ or str(home).startswith(mod.__name__)):
                _class_members(obj, out, seen)
    return out


def _guarded_functions() -> dict:
    """The guarded torch names' own code (a class's methods, a function's code, defaults and closure): a guarded
    name kept but its code swapped passes an identity check."""
    out: dict = {}
    seen: set = set()
    for owner, attr in _GUARDED.values():
        obj = getattr(owner, attr)
        if isinstance(obj, type):
            _class_members(obj, out, seen)
        for f in _functions_of(obj):
            out[(owner, attr)] = (obj, [(f, _function_state(f))])
    return out


def _profiler_modules() -> list:
    """The modules whose code records the candidate's work (the profiler, its event parsing, the FLOP counter,
    the dispatch-mode helpers) and the C modules underneath, found by name (some are absent in older torch)."""
    import importlib

    mods = []
    for name in ("torch.profiler", "torch.profiler.profiler", "torch.autograd.profiler", "torch.autograd.profiler_util",
                 "torch.utils.flop_counter", "torch.utils._python_dispatch", "torch._C._profiler", "torch._C._autograd"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            pass
    return mods


def _owner_name(owner) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    return f"{owner.__module__}.{owner.__qualname__}"


_HARNESS_FUNCTIONS: dict = {}  # filled in main(), once this module is complete

MAX_OPS = 200_000  # operator records sent back from one counted call
PULL_TIMEOUT_S = 600.0  # streaming a request's or a reply's tensors (the judge's watchdog bounds the whole request)


def _all_threads_config():
    """The profiler's setting that records operators on every thread of the process, not only the caller's."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):
        return None


NAN_POISON = float("nan")
VALUE_POISON = 1.0e4


def tampered() -> list[str]:
    """Guarded functions the candidate replaced (put back, and reported)."""
    changed = []
    for name, (owner, attr) in _GUARDED.items():
        if getattr(owner, attr, None) is not _ORIGINALS[name]:
            changed.append(name)
            setattr(owner, attr, _ORIGINALS[name])
    # the harness's own functions here (the timing library, the channel, the work records, this runner), the
    # guarded names' own code and the profiler's machinery: replaced, or their code, defaults or closure swapped,
    # they would measure or report for the candidate
    return changed + changed_functions(_HARNESS_FUNCTIONS)


def changed_functions(table: dict) -> list[str]:
    """The bindings of ``table`` (``_module_functions``) replaced, or whose functions' code, defaults or closure
    changed: their names, each put back."""
    changed = []
    for (owner, attr), (obj, functions) in table.items():
        now = vars(owner).get(attr)
        if now is not obj or any(_state_changed(f, state) for f, state in functions):
            changed.append(f"{_owner_name(owner)}.{attr}")
            for f, state in functions:
                _restore_state(f, state)
            setattr(owner, attr, obj)
    return changed


_OWN_THREADS: set[int] = set()  # this process's threads before the candidate's code ran


def candidate_threads() -> list[str]:
    """Python threads started since the candidate's code was loaded that are still alive."""
    return sorted(t.name for t in threading.enumerate() if t.ident not in _OWN_THREADS and t.is_alive())


# CPU time a thread of the candidate's may spend while it is timed: an idle thread (a compile pool's reader
# blocked on a pipe, a worker waiting on a queue) spends none or a few wake-ups; one that launches work, or
# computes beside the timed calls, spends that work's CPU time.
THREAD_CPU_S = 0.002
THREAD_CPU_SHARE = 0.02  # of the timed region's wall time, for long measurements


def compiled_operators(names) -> list[str]:
    """Of the operators ``names`` of namespaces torch does not register (the candidate's), those whose CPU kernel
    was registered from compiled code: the dispatcher names the file of each registration, a C++ source for an
    extension's ``TORCH_LIBRARY``, a Python file or ``<string>`` for a body in Python (whatever that body then
    reaches: numpy, a library through ctypes)."""
    dump = _ORIGINALS["torch._C._dispatch_dump"]
    out = []
    for name in sorted(n for n in names if "::" in n and n.split("::", 1)[0] not in _TORCH_NAMESPACES):
        try:
            text = str(dump(name))
        except Exception:  # noqa: BLE001 - not a registered operator (a record_function label): not compiled code
            continue
        kernels = [ln.split("registered at ", 1)[1] for ln in text.splitlines()
                   if ln.startswith(("CPU:", "CompositeImplicitAutograd", "CompositeExplicitAutograd"))
                   and "registered at " in ln]
        if kernels and all(not k.split(" :: ")[0].split(":")[0].endswith(".py") and not k.startswith("<")
                           for k in kernels):
            out.append(name)
    return out


def thread_cpu_s() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of each live Python thread the candidate started (the kernel's per-thread clock)."""
    out = {}
    for t in threading.enumerate():
        if t.ident in _OWN_THREADS or not t.is_alive():
            continue
        try:
            out[t.ident] = (t.name, time.clock_gettime(time.pthread_getcpuclockid(t.ident)))
        except (OSError, AttributeError, OverflowError):  # it ended meanwhile
            pass
    return out


def busy_threads(before: dict, after: dict, region_s: float) -> list[str]:
    """The candidate's threads that ran during a timed region (started before it or in it), with their CPU time."""
    limit = max(THREAD_CPU_S, THREAD_CPU_SHARE * region_s)
    busy = []
    for ident, (name, cpu) in after.items():
        spent = cpu - before.get(ident, (name, 0.0))[1]
        if spent > limit:
            busy.append(f"{name} ({1e3 * spent:.1f} ms of CPU)")
    return sorted(busy)


# ---------------------------------------------------------------------------------------------
# Framework state: set by the harness before every call, read back after it


def framework_state() -> dict:
    state = {
        "default_dtype": str(torch.get_default_dtype()),
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn.enabled": torch.backends.cudnn.enabled,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "matmul.fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "matmul.bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }
    for dev in ("cpu", "cuda"):
        try:
            state[f"autocast.{dev}"] = torch.is_autocast_enabled(dev)
        except (TypeError, RuntimeError):
            pass
    for var in ("NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"):  # read by cuBLAS / ATen at start
        state[f"env.{var}"] = os.environ.get(var)
    return state


_EXPECTED_STATE: dict = {}


def framework_changes() -> list[str]:
    """Settings that differ from what the harness set (then set again)."""
    now = framework_state()
    changed = [f"{k}={now.get(k)!r} (expected {v!r})" for k, v in _EXPECTED_STATE.items() if now.get(k) != v]
    if changed:
        timing.set_framework()
    return changed


# ---------------------------------------------------------------------------------------------
# Outputs


def _flatten(x) -> list:
    if isinstance(x, (list, tuple)):
        out = []
        for item in x:
            out.extend(_flatten(item))
        return out
    return [x]


def _storage_range(t) -> tuple[int, int]:
    """[start, end) of a tensor's storage, read through the references taken before the candidate's import."""
    s = _ORIGINALS["torch.Tensor.untyped_storage"](t)
    ptr = _ORIGINALS["torch.UntypedStorage.data_ptr"](s)
    return ptr, ptr + _ORIGINALS["torch.UntypedStorage.nbytes"](s)


def _storage_bytes(t) -> int:
    return _ORIGINALS["torch.UntypedStorage.nbytes"](_ORIGINALS["torch.Tensor.untyped_storage"](t))


def _overlaps(o, others) -> bool:
    return _overlaps_range(o, [_storage_range(x) for x in others
                               if _type(x) is _Tensor and x.device == o.device and _storage_bytes(x)])


EARLIER_WEAK_MAX = 64  # earlier outputs per instance whose storage is followed by a weak reference


class EarlierOutputs:
    """Weak references to the storages of an instance's earlier outputs, with their address ranges: they hold no
    memory (an 8 GiB output is let go as soon as the judge has it), yet say whether the candidate still holds a
    storage it returned. A new output overlapping a storage still alive is that storage returned again (the
    allocator never hands out memory of a live storage); one overlapping a storage let go is the allocator's reuse."""

    def __init__(self) -> None:
        self.refs: list[tuple[int, int, int]] = []  # (weak reference, start, end)

    def alive(self) -> list[tuple[int, int]]:
        """The ranges of earlier outputs whose storage someone still holds; the expired references are freed."""
        kept, ranges = [], []
        for ref, lo, hi in self.refs:
            if _ORIGINALS["torch.UntypedStorage._expired"](ref):
                _ORIGINALS["torch.UntypedStorage._free_weak_ref"](ref)
            else:
                kept.append((ref, lo, hi))
                ranges.append((lo, hi))
        self.refs = kept
        return ranges

    def add(self, outs: list) -> None:
        for o in outs:
            if _type(o) is _Tensor and o.layout is _strided and not o.is_meta and _storage_bytes(o):
                storage = _ORIGINALS["torch.Tensor.untyped_storage"](o)
                self.refs.append((_ORIGINALS["torch.UntypedStorage._weak_ref"](storage), *_storage_range(o)))
        while len(self.refs) > EARLIER_WEAK_MAX:
            _ORIGINALS["torch.UntypedStorage._free_weak_ref"](self.refs.pop(0)[0])


def _overlaps_range(o, ranges) -> bool:
    if not _storage_bytes(o):
        return False
    lo, hi = _storage_range(o)
    return any(lo < b and a < hi for a, b in ranges)


def inspect_outputs(outs: list, inputs: list, device: str, others=(), alive_earlier=()) -> tuple[list, list[str]]:
    """Plain CPU copies of the outputs and, per output, what is wrong with it ("" when nothing).
    ``others``: (what, tensors) an output must not share memory with, beside the inputs."""
    copies, problems = [], []
    ins = [x for x in inputs if _type(x) is _Tensor]
    for i, o in enumerate(outs):
        if _type(o) is not _Tensor:
            problems.append(f"output {i} is a {_type(o).__module__}.{_type(o).__qualname__}, not a plain torch.Tensor")
            copies.append(None)
            continue
        if o.layout is not _strided or o.is_meta or o.device.type != device:
            what = "meta" if o.is_meta else (str(o.layout) if o.layout is not _strided else f"on {o.device}")
            problems.append(f"output {i} is not a dense tensor on {device} ({what})")
            copies.append(None)
            continue
        if _storage_bytes(o) and any(x.device == o.device and _storage_bytes(x) for x in ins):
            lo, hi = _storage_range(o)
            if any(x.device == o.device and lo < _storage_range(x)[1] and _storage_range(x)[0] < hi for x in ins):
                problems.append(f"output {i} shares memory with an input (a view of it)")
                copies.append(None)
                continue
        shared = next((what for what, ts in others if _overlaps(o, ts)), None)
        if shared is None and alive_earlier and _overlaps_range(o, alive_earlier):
            shared = "an output of an earlier call, which the model still holds"
        if shared is not None:
            problems.append(f"output {i} shares memory with {shared}; return a freshly written tensor")
            copies.append(None)
            continue
        problems.append("")
        copies.append(o.detach())  # copied into the channel's arena with the reply (evals.judge.wire.pack)
    return copies, problems


def held_outputs(earlier: list, new: list) -> list:
    """The outputs an instance holds between calls, newest first (the call's own, then earlier ones), while they take
    at most the window of ``memory.held_window_bytes``: a small problem's every output is held through the attempt,
    a larger one's last two or one, an output over 1 GiB none (beside the next call's own it would double what
    the candidate holds). A buffer reused for a later output overlaps one that is held."""
    size = sum(_storage_bytes(t) for t in new)
    budget = memory.held_window_bytes(size)
    kept, total = [], 0
    for t in [*reversed(new), *reversed(earlier)]:
        total += _storage_bytes(t)
        if total > budget:
            break
        kept.insert(0, t)
    return kept


def poison(device: torch.device, value: float, out_nbytes: list[int]) -> None:
    """Fill the allocator's free memory with ``value``, so memory allocated and never written holds it."""
    if device.type != "cuda":
        blocks = []
        for nbytes in list(out_nbytes)[:8]:
            for _ in range(4):
                t = torch.empty(max(nbytes // 4, 1), dtype=torch.float32)
                t.fill_(value)
                blocks.append(t)
        del blocks
        return
    _cuda_sync()
    torch.cuda.empty_cache()
    free_bytes, _ = torch.cuda.mem_get_info()
    two_mb = 2 * 1024**2
    big = int(min(free_bytes * 0.5, 4 * 1024**3)) // two_mb * two_mb
    if big > 0:
        t = torch.empty(big // 4, dtype=torch.float32, device=device)
        t.fill_(value)
        del t
    small = [torch.empty(1024**2 // 4, dtype=torch.float32, device=device) for _ in range(8)]
    for s in small:
        s.fill_(value)
    del small
    _cuda_sync()


# ---------------------------------------------------------------------------------------------
# The candidate


class _State:
    """What ``runtime.bind_params`` reads from a model: its state_dict."""

    def __init__(self, state: dict):
        self._state = state

    def state_dict(self) -> dict:
        return self._state


class CandidateError(Exception):
    pass


def _class_from_source(source: str, module_name: str, file: str, class_name: str, whose: str) -> type:
    """``class_name`` from ``source`` run as a fresh module ``module_name`` (registered in sys.modules:
    dataclasses and pickling look classes up there); a failure is one CandidateError line."""
    module = _type(sys)(module_name)
    module.__file__ = file
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, module.__file__, "exec"), module.__dict__)
    except BaseException as exc:
        raise CandidateError(f"{whose} source failed to import: {_one_line(exc)}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise CandidateError(f"{whose} source defines no class {class_name}")
    return cls


def _problem_model(problem: dict | None):
    """The problem's ``Model`` class, from the source the judge sent (only for a program with ``module`` steps)."""
    if not problem or not problem.get("source"):
        raise CandidateError("the program has `module` steps but the judge sent no problem source to build them from")
    return _class_from_source(problem["source"], "mucutlass_problem", str(problem.get("path") or "<problem>"), "Model",
                              "the problem's")


def _construct(cls, init_args: list, seed: int, init_device: torch.device, device: torch.device):
    """``cls(*init_args)`` as the judge builds the reference: under ``seed``, with ``init_device`` as the default
    device (the GPU, or the CPU where the problem's Model cannot be built there: Problem.init_on_cpu), then moved
    to ``device``."""
    with torch.device(init_device):
        torch.manual_seed(seed)
        model = cls(*init_args)
    return model.to(device) if hasattr(model, "to") else model


def _own_model(cls, init_args: list, seed: int, state: dict, init_device: torch.device, device: torch.device):
    """The problem's Model built as the judge builds the reference, holding the reference's parameters and
    buffers for that seed."""
    model = _construct(cls, init_args, seed, init_device, device)
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError) as exc:
        raise CandidateError(f"the reference's parameters do not fit the problem's Model: {_one_line(exc)}") from None
    return model


class Runner:
    def __init__(self) -> None:
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cpu")
        self.factory = None
        self.instances: dict[int, object] = {}
        self.kept: dict[str, list] = {}
        self.graphs: list = []
        self.flusher = None
        self.is_program = False
        self.sealed = None  # the staged sets of a sealed-call measurement
        self.previous: dict[int, list] = {}  # per instance: earlier calls' outputs, held (a ring of buffers shows)
        self.earlier_weak: dict[int, EarlierOutputs] = {}  # per instance: every earlier output, followed weakly
        self.timed_outputs: list = []  # per timed input set: (its timed entry, last outputs, inputs)
        self.method = None  # how the last measurement was taken (evals.judge.timing)

    def dev(self, x):
        return x.to(self.device) if _type(x) is _Tensor else x

    # -- ops ---------------------------------------------------------------------------------
    def op_ping(self, req: dict) -> dict:
        if req.get("linger_s"):  # the closing ping: a process that ends itself meanwhile is a crash
            _sleep(min(float(req["linger_s"]), 5.0))
        return {"pid": os.getpid(), "cuda": self.cuda, "torch": torch.__version__,
                "gpu_name": torch.cuda.get_device_name() if self.cuda else None, "cwd": os.getcwd(),
                # what this process's allocator held at most (a claim: for the memory table, never a verdict)
                "peak_device_bytes": torch.cuda.max_memory_allocated() if self.cuda else 0}

    def op_load(self, req: dict) -> dict:
        self.device = torch.device(req["device"])
        if self.cuda and req.get("gpu_fraction"):  # the judge's plan for this problem, before the candidate's import
            torch.cuda.set_per_process_memory_fraction(min(1.0, float(req["gpu_fraction"])))
        cand = req["candidate"]
        init_args = list(req["init_args"])
        # where the reference is built: on the device, or on the CPU and moved (evals.problems.Problem.init_on_cpu)
        init_device = torch.device("cpu") if req.get("init_on_cpu") else self.device
        timing.set_framework()
        if cand.get("source") is not None:
            cls = _class_from_source(cand["source"], "mucutlass_candidate", f"<candidate {cand.get('name', 'ModelNew')}>",
                                     "ModelNew", "the candidate")

            def build(seed: int, state_dict: dict):
                return _construct(cls, init_args, seed, init_device, self.device)
        else:
            from dsl_compiler import runtime
            from dsl_compiler.ir import Program

            self.is_program = True
            program = Program.model_validate_json(cand["program_json"])
            from sol_models.estimate import runtime_options

            options = runtime_options(program)  # MUCUTLASS_CUDA_GRAPH / MUCUTLASS_FUSED_CASTS, off by default
            model_cls = _problem_model(req.get("problem")) if runtime.module_paths(program) else None

            def build(seed: int, state_dict: dict):
                state = {k: v.to(self.device) for k, v in state_dict.items()}
                owner, modules = _State(state), None
                if model_cls is not None:  # `module` steps call this Model's submodules, as an exported ModelNew does
                    owner = _own_model(model_cls, init_args, seed, state, init_device, self.device)
                    modules = runtime.bind_modules(program, owner)
                params = runtime.bind_params(program, owner)
                module = runtime.load(program, cand.get("backend", "interpreter"), params, cand.get("artifacts") or None,
                                      modules=modules, options=options)
                return module.to(self.device) if hasattr(module, "to") else module
        self.factory = build
        return {"framework": framework_changes(), "tampered": tampered()}

    def op_build(self, req: dict) -> dict:
        timing.set_framework()
        model = self.factory(int(req["model_seed"]), req.get("state_dict") or {})
        self.instances[int(req["instance"])] = model
        return {"framework": framework_changes(), "tampered": tampered()}

    def op_call(self, req: dict) -> dict:
        model = self.instances[int(req["instance"])]
        if req.get("inplace"):
            inputs = self.kept[req["inplace"]]
            with torch.no_grad():
                for x, y in zip(inputs, req["inputs"]):
                    if _type(x) is _Tensor:
                        x.copy_(y.to(x.device))
        else:
            inputs = [self.dev(x) for x in req["inputs"]]
        if req.get("keep"):
            self.kept = {req["keep"]: inputs}  # one set is written in place later; earlier ones are let go
        out_nbytes = [int(n) for n in req.get("out_nbytes", [])]
        if req.get("poison") is not None:
            poison(self.device, float(req["poison"]), out_nbytes)
        timing.set_framework()
        work = None
        t0 = _perf()
        if req.get("count"):  # this call's work is measured; its output is compared like every other's
            out, work = self.counted(model, inputs, bool(req["count"].get("kernels")))
        else:
            out = model(*inputs)
        if self.cuda:
            _cuda_sync()
        wall_s = _perf() - t0
        changed = framework_changes()
        outs = _flatten(out)
        # an output must be new memory: not an input, not the model's own state, not an earlier output
        # (held here, so its memory cannot be handed out again by the allocator meanwhile)
        held = [t for t in getattr(model, "parameters", lambda: [])()] + [t for t in getattr(model, "buffers", lambda: [])()]
        earlier = self.previous.get(int(req["instance"]), [])
        weak = self.earlier_weak.setdefault(int(req["instance"]), EarlierOutputs())
        copies, problems = inspect_outputs(outs, inputs, self.device.type, others=(
            ("the model's own parameters or buffers", held), ("an output of an earlier call", earlier)),
            alive_earlier=weak.alive())
        self.previous[int(req["instance"])] = held_outputs(earlier, [o for o in outs if _type(o) is _Tensor])
        weak.add(outs)
        # the inputs as they are after the call, as digests under the judge's key (their bytes stay here)
        inputs_after = compare.content_digests(inputs, int(req.get("input_key") or 0))
        return {"outputs": copies, "output_problems": problems, "n_outputs": len(outs), "inputs_after": inputs_after,
                "framework": changed, "tampered": tampered(), "wall_s": wall_s, "work": work}

    def counted(self, model, inputs: list, kernels: bool) -> tuple:
        """One forward with its work recorded: the ATen operators it dispatched on any thread (the profiler,
        a C++ observer no Python mode can be left), for a program the FLOPs its torch steps dispatched outside
        its own kernels (a FLOP counter), and with ``kernels`` the GPU kernels that ran."""
        _disable_current_modes = _ORIGINALS["torch.utils._python_dispatch._disable_current_modes"]
        FlopCounterMode = _ORIGINALS["torch.utils.flop_counter.FlopCounterMode"]
        get_total_flops = _ORIGINALS["torch.utils.flop_counter.FlopCounterMode.get_total_flops"]
        profile = _ORIGINALS["torch.profiler.profile"]
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity

        executor = getattr(model, "executor", None) if self.is_program else None
        if executor is not None:
            run_kernel = executor.run_kernel

            def kernel_outside_count(*args, **kwargs):  # the program's own kernels are not library work
                with _disable_current_modes():
                    return run_kernel(*args, **kwargs)

            executor.run_kernel = kernel_outside_count
        counter = FlopCounterMode(display=False) if self.is_program else None
        record_ops = not self.is_program  # a program's torch steps are counted by the FLOP counter above
        activities = ([ProfilerActivity.CPU] if record_ops or kernels else []) + \
            ([ProfilerActivity.CUDA] if kernels and self.cuda else [])
        work: dict = {"aten_flops": None, "ops": [], "kernels": [], "error": None}
        prof = None
        try:
            with contextlib.ExitStack() as stack:
                if activities:
                    # every thread for a Python candidate; a program's kernels launch from the calling thread, where
                    # the runtime sees the profiler on (and runs eagerly, each kernel under its launch)
                    prof = stack.enter_context(profile(activities=activities, record_shapes=record_ops,
                                                       experimental_config=_all_threads_config() if record_ops else None))
                if counter is not None:
                    stack.enter_context(counter)
                t_call = _perf()
                out = model(*inputs)
                if self.cuda:
                    _cuda_sync()
                work["call_us"] = (_perf() - t_call) * 1e6
        except RuntimeError as exc:  # the profiler stopped under it (the candidate ended it): nothing counted
            if prof is None or "profiler" not in str(exc).lower():
                raise
            work["error"] = _one_line(exc)
            return (out if "out" in locals() else None), work
        finally:
            if executor is not None:
                executor.run_kernel = run_kernel
        if counter is not None:
            work["aten_flops"] = int(get_total_flops(counter))
        if prof is not None:
            events = list(prof.events())
            index = {id(e): i for i, e in enumerate(events)}
            for e in events:
                if record_ops and e.device_type == DeviceType.CPU and len(work["ops"]) < MAX_OPS:
                    parent = index.get(id(e.cpu_parent), -1) if e.cpu_parent is not None else -1
                    op = [e.name, [list(s) for s in (e.input_shapes or [])], parent, None,
                          [str(d) for d in (getattr(e, "input_dtypes", None) or [])]]  # index operands multiply nothing
                    if "conv" in e.name:  # stride, padding and dilation: a strided conv's output positions
                        op[3] = [attribution.plain_arg(a) for a in (getattr(e, "concrete_inputs", None) or [])]
                    op.append(float(e.time_range.elapsed_us()))  # its CPU time span (us): where the call's time went
                    work["ops"].append(op)
                if kernels and e.device_type == DeviceType.CUDA:
                    work["kernels"].append([e.name, float(e.time_range.elapsed_us())])
            if kernels and self.cuda and not work["kernels"]:  # profilers that attach kernels to their CPU op
                for e in events:
                    for k in getattr(e, "kernels", []) or []:
                        work["kernels"].append([k.name, float(getattr(k, "duration", 0.0))])
            work["ops_truncated"] = len(events) > MAX_OPS
            if record_ops and not self.cuda:
                work["compiled_ops"] = compiled_operators({op[0] for op in work["ops"]})
        return out, work

    def op_time(self, req: dict) -> dict:
        from evals.judge.timing import TimingMethod, make_flusher, time_candidate

        # a thread of the candidate's may exist (the runtime's compile workers do) but not run while it is timed:
        # work such a thread launches runs beside or after the timed calls, never inside them
        threads_before, t_region = thread_cpu_s(), _perf()
        model = self.instances[int(req["instance"])]
        input_sets = [[self.dev(x) for x in s] for s in req["input_sets"]]
        method = TimingMethod.from_settings(req["settings"])
        if self.device.type == "cuda":
            self.flusher = make_flusher(self.device, method, self.flusher)
        timing.set_framework()
        if self.device.type == "cuda":
            result = time_candidate(model, input_sets, self.flusher, method, graph=bool(req.get("graph", True)))
        else:  # one thread: on a shared host a call's time is otherwise its threads' wait for a core
            torch.set_num_threads(1)
            result = timing.time_candidate_cpu(model, input_sets, method)
        self.graphs = result.pop("graphs")
        # each input set's last timed call's outputs are fetched one set at a time (timed_output), so no reply
        # carries more than one set's outputs
        self.timed_outputs = [(entry, outs, ins) for entry, outs, ins in zip(self.graphs, result.pop("last_outputs"),
                                                                            input_sets)]
        self.method = result["method"]
        result["framework"] = framework_changes()
        result["tampered"] = tampered()
        result["threads"] = busy_threads(threads_before, thread_cpu_s(), _perf() - t_region)
        return result

    def op_timed_output(self, req: dict) -> dict:
        """The outputs of timed input set ``index``'s last timed call: its graph replayed once more and read at
        once (separately captured graphs may write one buffer a program keeps across calls)."""
        entry, outs, ins = self.timed_outputs[int(req["index"])]
        if self.method == "cuda_graph":
            entry["run"]()
            if self.cuda:
                _cuda_sync()
            outs = entry["outputs"]()
        copies, problems = inspect_outputs(_flatten(outs), ins, self.device.type)
        return {"outputs": copies, "output_problems": problems, "n_outputs": len(copies), "tampered": tampered()}

    def op_timed_sample(self, req: dict) -> dict:
        """New values written into the inputs of timed call ``index`` (the same buffers), the call
        replayed as timed, and its output returned."""
        entry = self.graphs[int(req["index"])]
        with torch.no_grad():
            for x, y in zip(entry["inputs"], req["inputs"]):
                if _type(x) is _Tensor:
                    x.copy_(y.to(x.device))
        entry["run"]()
        if self.cuda:
            _cuda_sync()
        copies, problems = inspect_outputs(_flatten(entry["outputs"]()), entry["inputs"], self.device.type)
        return {"outputs": copies, "output_problems": problems, "tampered": tampered()}

    # -- sealed calls (evals.judge.sealed): the judge's clock times the go request --------------------
    def op_sealed_stage(self, req: dict) -> dict:
        """K masked input sets ([K, ...] per input position) and the outputs' shapes: everything the go
        request writes is allocated now."""
        specs = [list(s) for s in req["out_specs"]]
        # each output weighed in the order its timed output lies in memory (a channels-last output read as laid,
        # not copied row by row inside the go request); the judge weighs the fetched outputs in the same order
        timed = [o for o in _flatten(self.graphs[0]["outputs"]()) if _type(o) is _Tensor] if self.graphs else []
        orders = [sealed.memory_order(o) if i < len(timed) and timed[i].dim() == len(spec[0]) else None
                  for i, (o, spec) in enumerate(zip(timed + [None] * len(specs), specs))] if timed else None
        self.sealed = sealed.Staged.allocate(list(req["masked"]), specs, self.device, orders)
        if self.cuda:
            # an eager call allocates its output, and the block its previous output freed may have gone back to
            # the device (a 6 GiB output's first touch took ~35 ms of the go request): one untimed call on values
            # this process already holds leaves that block in the allocator's cache (the staged sets stay masked);
            # two calls: the second frees the first's block whatever the entry held before
            with torch.no_grad():
                for entry in self.graphs[:self.sealed.k]:
                    if "graph" not in entry:
                        timing.set_framework()
                        entry["run"]()
                        entry["run"]()
            _cuda_sync()
        return {"k": self.sealed.k, "orders": self.sealed.orders, "tampered": tampered()}

    def op_sealed_go(self, req: dict) -> dict:
        """Unmask, call and checksum the K staged sets back to back on the timed calls' buffers."""
        timing.set_framework()
        with torch.no_grad():
            sums = sealed.run_go(self.sealed, self.graphs, [int(s) for s in req["mask_seeds"]],
                                 int(req["checksum_seed"]))
        if self.cuda:
            _cuda_sync()
        return {"checksums": sums.cpu().tolist()}

    def op_sealed_fetch(self, req: dict) -> dict:
        """The go request's outputs, [K, ...] per output position."""
        staged, self.sealed = self.sealed, None
        return {"outputs": [o.detach() for o in staged.outputs], "framework": framework_changes(),
                "tampered": tampered()}

    def op_timed_kernels(self, req: dict) -> dict:
        """The GPU kernels of one more run of each timed call as it was timed (a captured graph's replay runs
        exactly the captured kernels, and no Python of the candidate's runs to see the profiler), with their
        times: the work the timed calls did, not the counted call's."""
        if not self.cuda or not self.graphs:
            return {"kernels": [], "graphs": 0}
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity

        kernels: list = []
        with _ORIGINALS["torch.profiler.profile"](activities=[ProfilerActivity.CUDA]) as prof:
            for entry in self.graphs:
                timing.set_framework()
                entry["run"]()
            _cuda_sync()
        for e in prof.events():
            if e.device_type == DeviceType.CUDA and len(kernels) < MAX_OPS:
                kernels.append([e.name, float(e.time_range.elapsed_us())])
        return {"kernels": kernels, "graphs": sum("graph" in e for e in self.graphs), "entries": len(self.graphs),
                "tampered": tampered()}

    def op_release_timed(self, req: dict) -> dict:
        """The timed calls' graphs, outputs and staged sets let go, their memory back to the device: the call whose
        work is recorded runs eagerly after them (beside a graph's pool holding an 8 GiB output, an eager call of
        the same model ran out of the candidate's share)."""
        self.graphs, self.timed_outputs, self.sealed = [], [], None
        gc.collect()
        if self.cuda:
            _cuda_sync()
            torch.cuda.empty_cache()
        return {}

    def op_wall(self, req: dict) -> dict:
        """``n`` back-to-back timed calls with no flush and no events; the judge's clock times this."""
        entries = self.graphs
        for i in range(int(req["n"])):
            entries[i % len(entries)]["run"]()
        if self.cuda:
            _cuda_sync()
        return {}


def _warm_profiler(cuda: bool) -> None:
    """The profiler's first start in a process takes about a second (measured on a CPU host): taken here,
    while the process waits as a spare, not in the attempt's counted call."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with _ORIGINALS["torch.profiler.profile"](activities=activities, record_shapes=True,
                                                  experimental_config=_all_threads_config()) as prof:
            torch.zeros(1).add_(1)
        prof.events()
    except Exception:  # noqa: BLE001 - a profiler that will not start fails the counted call instead
        pass


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{_type(exc).__name__}: {text}" if text else _type(exc).__name__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--arena-fd", type=int, default=None)
    ap.add_argument("--armed-fd", type=int, default=None, help="closed at start, once this process is undumpable")
    args = ap.parse_args(argv)
    sock = socket.socket(fileno=args.fd)  # the supervisor passed this descriptor and the arena's, no other
    arena = wire.Arena.attach(args.arena_fd) if args.arena_fd is not None else None
    if "" in sys.path:
        sys.path.remove("")
    timing.set_framework()
    _EXPECTED_STATE.update(framework_state())
    _HARNESS_FUNCTIONS.update(_module_functions(sys.modules[__name__], timing, wire, statistics, sealed,
                                                attribution, defined_only=True))
    _HARNESS_FUNCTIONS.update(_guarded_functions())
    _OWN_THREADS.update(t.ident for t in threading.enumerate())
    runner = Runner()
    if runner.cuda:
        torch.empty(1, device="cuda")  # the CUDA context, before the judge needs it
        share = os.environ.get("MUCUTLASS_GPU_FRACTION")
        if share:  # this candidate's part of its judge's share of the GPU (evals.judge.memory); a candidate can undo it
            torch.cuda.set_per_process_memory_fraction(min(1.0, float(share)))
        if arena is not None and os.environ.get("MUCUTLASS_PIN_ARENA_MB"):
            arena.pin(int(os.environ["MUCUTLASS_PIN_ARENA_MB"]) << 20)  # while a spare: the judge pins its side too
    _warm_profiler(runner.cuda)
    # after the profiler's first run, which imports and binds what it uses lazily
    _HARNESS_FUNCTIONS.update(_module_functions(*_profiler_modules()))
    gc.freeze()
    while True:
        try:
            req = wire.recv(sock, trusted=True)
        except wire.ChannelError:
            return 0  # the judge closed the channel
        nonce, seq, op = req.get("nonce"), req.get("seq"), req.get("op", "")
        reply_at = req.get("reply_at", 0)
        handler = getattr(runner, f"op_{op}", None)
        fatal = False
        t0 = _perf()
        try:
            # an in-place call's new values land on the host and are copied into the kept set's buffers: the
            # device never holds a third set of inputs beside the kept one and the call's
            to = torch.device("cpu") if op == "call" and req.get("inplace") else runner.device
            if runner.cuda and op == "call" and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > 1 << 28:
                torch.cuda.empty_cache()  # what earlier calls freed, back to the device before a set's inputs land
            req = wire.unpack(req, arena, to, sock=sock, deadline=time.monotonic() + PULL_TIMEOUT_S)
            if handler is None:
                raise CandidateError(f"unknown operation {op!r}")
            reply = {"ok": True, "result": handler(req)}
        except CandidateError as exc:
            reply = {"ok": False, "error": str(exc), "kind": "candidate"}
        except BaseException as exc:  # noqa: BLE001 - a candidate may raise anything
            if isinstance(exc, KeyboardInterrupt):
                return 130
            traceback.print_exc(file=sys.stderr)
            fatal = _is_fatal(exc)
            reply = {"ok": False, "error": _one_line(exc), "kind": "cuda" if fatal else "exception",
                     "tampered": tampered()}
        reply.update(nonce=nonce, seq=seq, handler_s=_perf() - t0)
        try:
            wire.send_message(sock, _wire(reply), arena, reply_at, deadline=time.monotonic() + PULL_TIMEOUT_S)
        except Exception as exc:  # an unpicklable result the candidate slipped in
            wire.send(sock, {"ok": False, "error": f"the reply could not be sent: {_one_line(exc)}",
                                "kind": "exception", "nonce": nonce, "seq": seq})
        if fatal:
            os._exit(3)  # a CUDA error leaves the context unusable
        del req, reply  # the reply's outputs and the request's inputs are let go before the next request arrives


def _wire(x):
    """Only what the judge's reader admits: tensors, plain numbers, strings, lists and dicts."""
    if _type(x) is _Tensor or x is None or _type(x) in (bool, int, float, str):
        return x
    if isinstance(x, dict):
        return {str(k): _wire(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_wire(v) for v in x]
    if isinstance(x, (int, float)):
        return float(x) if isinstance(x, float) else int(x)
    return str(x)


def _is_fatal(exc: BaseException) -> bool:
    if _type(exc).__name__ == "AcceleratorError":
        return True
    text = str(exc)
    return torch.cuda.is_available() and any(
        s in text for s in ("illegal memory access", "illegal address", "unspecified launch failure",
                            "misaligned address", "device-side assert", "CUDA error"))


if __name__ == "__main__":
    sys.exit(main())
