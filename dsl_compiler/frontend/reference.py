"""Building the reference ``Model`` (on the meta device where it can) and tracing it with torch.fx
(``torch.export`` when symbolic tracing fails). The reference is handed in as a value: a problem
(``run_vocabulary.problem.Problem``) or a Python module."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.frontend import library_modules
from dsl_compiler.frontend.masks import fold_comparison_masks
from run_vocabulary.problem import ALL_PRECISIONS, Problem


@dataclass
class LoadedReference:
    name: str
    module: Any  # the Python module defining Model, get_inputs, get_init_inputs
    allowed_precisions: tuple[str, ...] = ALL_PRECISIONS


def load_reference(problem: Problem | ModuleType) -> LoadedReference:
    """``problem`` is a loaded problem or a module defining ``Model`` and ``get_inputs`` (all precisions
    allowed); a file is loaded by its caller (``evals.problems.load_problem``)."""
    if isinstance(problem, (str, Path)):
        raise TraceError("problem", f"{problem}: the frontend traces a loaded problem, not a path",
                         "load the file first (evals.problems.load_problem) and trace the problem it returns")
    if isinstance(problem, Problem):
        module, name, allowed = problem.module, problem.name, tuple(problem.allowed_precisions)
    else:
        module, name, allowed = problem, "", ()
    if isinstance(module, str):
        module = sys.modules.get(module) or importlib.import_module(module)
    name = name or getattr(module, "__name__", None) or "problem"  # a module-like value may lack __name__
    for attr in ("Model", "get_inputs"):
        if not hasattr(module, attr):
            raise TraceError("problem", f"{name} defines no `{attr}`", "a problem defines Model, get_inputs and get_init_inputs")
    return LoadedReference(str(name), module, allowed or LoadedReference.allowed_precisions)


class TraceError(Exception):
    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.diagnostic = Diagnostic(code=code, message=message, hint=hint)


@dataclass(frozen=True)
class ParamRef:
    """A model tensor by its state_dict key (a parameter or buffer of a called module)."""

    key: str


@dataclass
class Traced:
    gm: Any  # torch.fx.GraphModule
    state: dict[str, Any]  # state_dict key -> tensor (meta or real)
    example_inputs: list[Any]
    # submodules whose forward() torch.fx cannot follow, traced as one call each: path -> why (one line)
    opaque: dict[str, str] | None = None


_MAX_OPAQUE = 16  # submodules kept whole before giving up on a model


def _opaque_module(model: Any, error: BaseException) -> str | None:
    """The path of the innermost submodule (not the model itself) whose forward() raised ``error`` while tracing."""
    import traceback

    paths = {id(m): path for path, m in model.named_modules() if path}
    tb, found = error.__traceback__, None
    for frame, _ in traceback.walk_tb(tb):
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "forward" else None
        if owner is not None and id(owner) in paths:
            found = paths[id(owner)]
    return found


@functools.cache
def _buffer_tracer() -> type:
    import torch.fx

    class _BufferTracer(torch.fx.Tracer):
        """torch.fx's tracer with buffers as graph attributes: by default forward() reads a buffer as its value, and
        what it computes from one (a causal mask `bias[:, :, :T, :T] == 0`) becomes a constant outside state_dict
        that no program can bind."""

        proxy_buffer_attributes = True

    return _BufferTracer


def _trace_keeping_opaque(model: Any, first_error: BaseException) -> tuple[Any, dict[str, str]] | None:
    """torch.fx with each submodule whose forward() stops it kept as one call (a leaf); None when what stops
    it is in the model's own forward()."""
    import torch.fx

    opaque: dict[str, str] = {}
    error = first_error
    while len(opaque) < _MAX_OPAQUE:
        path = _opaque_module(model, error)
        if path is None or path in opaque:
            return None
        opaque[path] = untraceable_message(error, error).split(";")[0].replace("forward()", f"{path}.forward()", 1)
        keep = set(opaque)

        class _Tracer(_buffer_tracer()):
            def is_leaf_module(self, m, qualname):
                return qualname in keep or super().is_leaf_module(m, qualname)

        try:
            graph = _Tracer().trace(model)
            return torch.fx.GraphModule(model, graph), opaque
        except Exception as exc:  # noqa: BLE001 - another submodule (or the model) stops torch.fx
            error = exc
    return None


def build_and_trace(ref: LoadedReference) -> Traced:
    # For each submodule torch.fx cannot follow, torch.export prints the partial graph it gave up on to
    # stderr and logs warnings about it: the frontend says the same in one reason line per such submodule.
    with _torch_logs_dropped(), _stderr_muted_in_this_thread():
        return _build_and_trace(ref)


@contextlib.contextmanager
def _torch_logs_dropped():
    """Drop the records torch's loggers emit from this thread while the block runs (other threads keep theirs).
    torch's loggers mostly have handlers of their own and do not propagate, so the filter goes on every
    handler under ``torch``."""
    import torch  # noqa: F401 - torch gives its loggers their handlers when it is imported

    thread = threading.get_ident()

    class _ThisThread(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.thread != thread

    loggers = [logging.getLogger("torch")] + [
        lg for name, lg in list(logging.root.manager.loggerDict.items())
        if name.startswith("torch.") and isinstance(lg, logging.Logger)]
    handlers = list({id(h): h for lg in loggers for h in lg.handlers}.values())
    drop = _ThisThread()
    for handler in handlers:
        handler.addFilter(drop)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(drop)


class _StderrOfOtherThreads:
    """``sys.stderr`` while some thread traces: that thread's writes are dropped, every other thread's pass."""

    def __init__(self, stream: Any):
        self.stream = stream

    def write(self, text: str) -> int:
        return len(text) if _muted_threads.get(threading.get_ident()) else self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


_muted_lock = threading.Lock()
_muted_threads: dict[int, int] = {}  # thread id -> depth
_stderr_proxy: _StderrOfOtherThreads | None = None


@contextlib.contextmanager
def _stderr_muted_in_this_thread():
    """Drop what this thread writes to ``sys.stderr`` while the block runs; other threads still write."""
    global _stderr_proxy
    thread = threading.get_ident()
    with _muted_lock:
        if not _muted_threads:
            _stderr_proxy = _StderrOfOtherThreads(sys.stderr)
            sys.stderr = _stderr_proxy
        _muted_threads[thread] = _muted_threads.get(thread, 0) + 1
    try:
        yield
    finally:
        with _muted_lock:
            _muted_threads[thread] -= 1
            if not _muted_threads[thread]:
                del _muted_threads[thread]
            if not _muted_threads and _stderr_proxy is not None:
                if sys.stderr is _stderr_proxy:  # left alone if someone replaced it meanwhile
                    sys.stderr = _stderr_proxy.stream
                _stderr_proxy = None


def _shape_prop(gm: Any) -> Any:
    """torch.fx's ShapeProp, less its ``traceback.print_exc()`` for each node that fails (on meta tensors a
    submodule kept whole fails as expected: ``.item()`` has no meta value, and shapes come from real
    tensors instead) and less its wrapping of the error, so a failure's first line is its cause. Records ``tensor_meta`` as ShapeProp does, and non-tensor results (sizes) as
    ``const`` so `x.view(x.size(0), -1)` folds."""
    import torch
    import torch.fx
    from torch.fx.node import map_aggregate
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    class _Prop(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            found_tensor = False

            def tensor_meta(obj):
                nonlocal found_tensor
                if isinstance(obj, torch.Tensor):
                    found_tensor = True
                    return _extract_tensor_metadata(obj)
                return obj

            meta = map_aggregate(result, tensor_meta)
            if found_tensor:
                n.meta["tensor_meta"] = meta
            n.meta["type"] = type(result)
            if isinstance(result, (int, float, bool)) or (
                isinstance(result, (tuple, list, torch.Size)) and all(isinstance(v, int) for v in result)
            ):
                n.meta["const"] = tuple(result) if isinstance(result, (list, torch.Size)) else result
            return result

    return _Prop(gm)


def _propagate_shapes(gm: Any, inputs: list[Any], state: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``gm`` with every node's shape recorded, and its state; on small real tensors where a meta kernel is missing
    (the module then moves to the CPU, and the state with it)."""
    import torch

    try:
        _shape_prop(gm).run(*inputs)
    except Exception:
        # meta kernels are missing for a few ops: propagate on small real tensors of the same shapes
        real_inputs = [torch.rand(x.shape, dtype=x.dtype) if isinstance(x, torch.Tensor) else x for x in inputs]
        gm = gm.to_empty(device="cpu") if any(p.is_meta for p in gm.parameters()) else gm
        try:
            _shape_prop(gm).run(*real_inputs)
        except Exception as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise TraceError("trace", f"shape propagation failed: {first}", "check get_inputs() against forward()") from None
        state = dict(gm.state_dict(keep_vars=True))
    return gm, state


def tensor_attributes(gm: Any, model: Any) -> dict[str, Any]:
    """The tensors ``gm`` reads that ``model`` holds as plain attributes, outside its state_dict (an initial state
    ``self.h0 = torch.randn(...)`` set in __init__), by dotted path: a program binds them as params
    (``dsl_compiler.runtime.bind_params``), and the judge sends them with the state_dict."""
    from dsl_compiler.runtime import plain_tensor_attributes

    held = plain_tensor_attributes(model)
    return {str(n.target): held[str(n.target)] for n in gm.graph.nodes if n.op == "get_attr" and str(n.target) in held}


def _build_and_trace(ref: LoadedReference) -> Traced:
    import torch
    import torch.fx

    mod = ref.module
    init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
    model = inputs = None
    # Shapes are all we need: build on the meta device (no memory, no time); some constructors
    # need real values (`.item()`), so fall back to the CPU.
    for device in ("meta", "cpu"):
        try:
            torch.manual_seed(0)
            with torch.device(device):
                model = mod.Model(*init)
                inputs = list(mod.get_inputs())
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
            break
        except Exception as exc:
            error = exc
            model = None
    if model is None:
        raise TraceError("problem", f"building Model(*get_init_inputs()) failed: {error}", "check get_init_inputs")

    state = dict(model.state_dict(keep_vars=True))
    opaque: dict[str, str] = {}
    try:
        gm = torch.fx.GraphModule(model, _buffer_tracer()().trace(model))
    except Exception as fx_error:
        try:
            gm = torch.export.export(model, tuple(inputs), strict=False).module()
            state = dict(gm.state_dict(keep_vars=True))
        except Exception as export_error:
            kept = _trace_keeping_opaque(model, fx_error)
            if kept is None:
                raise TraceError("trace", untraceable_message(fx_error, export_error),
                                 "trace what runs on every input (move a branch on values outside Model), or write the "
                                 "program by hand") from None
            gm, opaque = kept
    gm, state = _propagate_shapes(gm, inputs, state)
    if fold_comparison_masks(gm):  # masked_fill(x, m == 0, v): one step of float operands
        gm, state = _propagate_shapes(gm, inputs, state)
    # LSTM / GRU / RNN calls unrolled, attention and Transformer layers decomposed into elementary ops (or into calls
    # of their children, taken next round): their shapes anew
    while library_modules.rewrite(gm):
        gm, state = _propagate_shapes(gm, inputs, state)
    state.update(tensor_attributes(gm, model))
    gm._mucutlass_opaque = opaque  # normalize reads it: each such call_module is one `module` torch step
    return Traced(gm, state, inputs, opaque)


# What stops torch.fx, by its message: the construct, in the words of a model's author.
_CONSTRUCTS = (
    ("cannot be used as inputs to control flow", "a branch or loop on a tensor's value"),
    ("not 'Proxy'", "a Python number taken from a tensor's value (int(), float(), .item())"),
    ("cannot be interpreted as an integer", "a Python number taken from a tensor's value (int(), float(), .item())"),
    ("Proxy object cannot be iterated", "a Python loop over a tensor's rows"),
    ("data-dependent", "a shape or branch that depends on a tensor's values"),
)


def untraceable_message(fx_error: BaseException, export_error: BaseException) -> str:
    """One line naming what in forward() stopped tracing and where: the construct, its file and line, and
    the source line itself (from torch.fx's traceback, the last frame outside torch)."""
    import linecache
    import traceback

    import torch

    text = f"{fx_error} {export_error}"
    construct = next((name for key, name in _CONSTRUCTS if key in text), None)
    torch_dir = str(Path(torch.__file__).parent)
    frames = [f for f in traceback.extract_tb(fx_error.__traceback__) if not f.filename.startswith(torch_dir)
              and not f.filename.startswith(str(Path(__file__).parent))]
    where = ""
    if frames:
        f = frames[-1]
        line = (f.line or linecache.getline(f.filename, f.lineno)).strip()
        where = f" at {Path(f.filename).name}:{f.lineno} in {f.name}()" + (f": `{line}`" if line else "")
    first = next((ln for ln in str(fx_error).splitlines() if ln.strip()), type(fx_error).__name__)
    what = f"has {construct}" if construct else f"stops torch.fx ({first[:160]})"
    return f"forward() {what}{where}; neither torch.fx nor torch.export can follow it"


# ---------------------------------------------------------------------------------------------
