"""Export a built program as a standalone Python file defining ``ModelNew``.

The file needs torch and the built kernel libraries, nothing of mucutlass: it carries the
program's steps and each kernel's C ABI as data, and a copy of the runtime's portable block
(``cutlass_runtime``, between its ``portable`` markers). Given the problem's source, ``ModelNew``
subclasses the problem's ``Model``: the same constructor arguments create the same parameters in
the same order, so a seeded initialisation matches the reference; forward runs the program on the
CUTLASS kernels, reading the parameters by their ``state_dict`` keys. Without the problem source,
``ModelNew`` creates the declared parameters itself (uninitialised; load a state_dict).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import shutil
from pathlib import Path

from dsl_compiler import cutlass_runtime, fused_cast
from dsl_compiler.cutlass.emit import emit_program
from dsl_compiler.ir import Program
from dsl_compiler.run_settings import RuntimeOptions
from dsl_compiler.runtime import module_paths

_RUNNER = r'''

PROGRAM = json.loads(__PROGRAM__)
KERNELS = json.loads(__KERNELS__)
# how forward runs: the input casts as one launch ("fused_casts": the jobs; the library is KERNELS[FUSED_CAST_LIB])
# and the whole program replayed from a CUDA graph (CUDA_GRAPH; MUCUTLASS_CUDA_GRAPH=on / off overrides it)
RUNTIME = json.loads(__RUNTIME__)
FUSED_CAST_LIB = "<fused_cast>"
CUDA_GRAPH = {"on": True, "off": False}.get(os.environ.get("MUCUTLASS_CUDA_GRAPH", "").strip().lower(),
                                            RUNTIME["cuda_graph"])
_HERE = os.path.dirname(os.path.abspath(__file__))


def _lib_path(name):
    local = os.path.join(_HERE, KERNELS[name]["local"]) if KERNELS[name]["local"] else None
    return local if local and os.path.exists(local) else KERNELS[name]["lib"]


def _as_declared(t, decl):
    shape = tuple(decl["shape"])
    if decl["kind"] == "param" and tuple(t.shape) != shape and t.dim() == len(shape):
        padded = t.new_zeros(shape)  # declared larger: zero-padded once (a GEMM's K, a conv's channels)
        padded[tuple(slice(0, s) for s in t.shape)] = t
        t = padded
    t = t.to(TORCH_DTYPE[decl["dtype"]]) if t.dtype != TORCH_DTYPE[decl["dtype"]] else t
    if decl.get("layout") == "channels_last" and t.dim() >= 3:
        return _channels_last(t)
    return t


def _channels_last_step(x, dtype=None):
    if dtype is None:
        return _channels_last(x)
    if x.dim() < 3:
        return x.to(TORCH_DTYPE[dtype])
    inner = x.permute(0, *range(2, x.dim()), 1)
    out = torch.empty(inner.shape, dtype=TORCH_DTYPE[dtype], device=x.device)
    out.copy_(inner)  # layout and element type in one kernel
    return _channels_last_view(out)


def _zero_insert_step(x, stride, output_padding=0):
    # a transposed conv of stride s is the stride-1 one over its input with s - 1 zeros between pixels
    dims = x.dim() - 2
    steps = (stride,) * dims if isinstance(stride, int) else tuple(stride)
    extra = (output_padding,) * dims if isinstance(output_padding, int) else tuple(output_padding)
    spans = [(n - 1) * st + 1 for n, st in zip(x.shape[2:], steps)]
    out = x.new_zeros((*x.shape[:2], *(sp + e for sp, e in zip(spans, extra))))
    if x.dim() >= 3 and not x.is_contiguous() and x.permute(0, *range(2, x.dim()), 1).is_contiguous():
        out = _channels_last_step(out)
    out[(slice(None), slice(None), *(slice(0, sp, st) for sp, st in zip(spans, steps)))] = x
    return out


def _channel_view(x, channels):
    if not channels:
        return x
    cl = x.dim() >= 3 and not x.is_contiguous() and x.permute(0, *range(2, x.dim()), 1).is_contiguous()
    return x.narrow(1 if cl else x.dim() - 1, channels[0], channels[1] - channels[0])


def _torch_step(index, step, env, modules=None):
    if _TORCH_STEPS is not None:
        return _torch_steps.run(_TORCH_STEPS[index], env, modules, _TOTALS)
    out = _plain_torch_step(step, env, modules)
    if step.get("channels"):  # torch y[a:b] = ...: written into channels a..b of y
        name, value = step["outputs"][0], out[step["outputs"][0]]
        cl = value.dim() >= 3 and not value.is_contiguous() and value.permute(0, *range(2, value.dim()), 1).is_contiguous()
        spec = {"name": name, "channels": (step["channels"][0], _TOTALS_PLAIN.get(name, step["channels"][1]))}
        buf, view = _slice_output(env, spec, tuple(value.shape), value.dtype, value.device, cl)
        view.copy_(value)
        out[name] = buf
    return out


def _plain_torch_step(step, env, modules):
    import torch.nn.functional as F
    args = [_channel_view(env[a["name"]], a.get("channels")) if a["kind"] == "tensor" else a["value"] for a in step["args"]]
    kwargs = {k["key"]: k["value"] for k in step["kwargs"]}
    if step["fn"] == "module":  # the model's own submodule (a part torch.fx cannot follow)
        if kwargs["path"] not in (modules or {}):
            raise CutlassError(f"module step '{kwargs['path']}': the model's submodule is not bound")
        out, leaves = modules[kwargs["path"]](*args), []
        for item in (out if isinstance(out, (tuple, list)) else [out]):  # nested tuples flattened (an LSTM's)
            leaves.extend(item if isinstance(item, (tuple, list)) else [item])
        return {name: t.contiguous() for name, t in zip(step["outputs"], leaves)}
    special = {  # whitelist functions whose meaning differs from torch's function of that name
        "channels_last": _channels_last_step,
        "to": lambda x, dtype: x.to(TORCH_DTYPE[dtype]),
        "contiguous": lambda x: x.contiguous(),
        # KernelBench never calls eval(): BatchNorm normalises with the batch's own statistics
        "batch_norm": lambda x, weight=None, bias=None, eps=1e-5, momentum=0.1: F.batch_norm(
            x, None, None, weight, bias, training=True, momentum=momentum, eps=eps),
        "instance_norm": lambda x, weight=None, bias=None, eps=1e-5: F.instance_norm(x, weight=weight, bias=bias, eps=eps),
        "zero_insert": _zero_insert_step,
        "forward_filter": lambda w: _channels_last_step(w.transpose(0, 1).flip(tuple(range(2, w.dim())))),
    }
    fn = special.get(step["fn"]) or getattr(F, step["fn"], None) or getattr(torch, step["fn"])
    result = fn(*args, **kwargs)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    return dict(zip(step["outputs"], results))


# channels of each tensor that kernels and steps fill by slices (store y[a:b]): the largest end
_TOTALS_PLAIN = {}
for _s in PROGRAM["steps"]:
    for _name, _ch in ([(st["name"], st.get("channels")) for st in _s.get("stores", ())] if "op" in _s
                       else [(_s["outputs"][0], _s.get("channels"))]):
        if _ch:
            _TOTALS_PLAIN[_name] = max(_TOTALS_PLAIN.get(_name, 0), _ch[1])

try:  # the exact whitelist when mucutlass is installed; its steps are validated once, here
    from dsl_compiler import ir as _ir, torch_steps as _torch_steps
    _TORCH_STEPS = {i: _ir.TorchStep.model_validate(s) for i, s in enumerate(PROGRAM["steps"]) if "op" not in s}
    _TOTALS = _TOTALS_PLAIN
except ImportError:
    _TORCH_STEPS = None


def run_program(inputs, params, modules=None):
    decls = [d for d in PROGRAM["decls"] if d["kind"] == "input"]
    if len(inputs) != len(decls):
        raise CutlassError(f"the program takes {len(decls)} input(s), got {len(inputs)}")
    env = {d["name"]: _as_declared(x, d) for d, x in zip(decls, inputs)}
    for d in PROGRAM["decls"]:
        if d["kind"] == "param":
            env[d["name"]] = _as_declared(params[d["name"]], d)
    done = ()
    if RUNTIME["fused_casts"]:
        cast = run_fused_casts(_lib_path(FUSED_CAST_LIB), RUNTIME["fused_casts"], env)
        if cast is not None:  # else (an input not contiguous on the GPU) the steps below run them
            env.update(cast)
            done = {i for j in RUNTIME["fused_casts"] for i in j["steps"]}
    for i, step in enumerate(PROGRAM["steps"]):
        if i in done:
            continue
        if "op" in step:
            env.update(call_kernel(_lib_path(step["name"]), step["name"], step["op"], KERNELS[step["name"]]["abi"], env))
        else:
            env.update(_torch_step(i, step, env, modules))
    return [env[name] for name in PROGRAM["outputs"]]


def _params_of(module):
    state = dict(module.state_dict(keep_vars=False))
    out = {}
    for d in PROGRAM["decls"]:
        if d["kind"] == "param":
            t = state[d["source"]]
            cached = module._mucutlass_bound.get(d["name"])
            if cached is None or cached[0] is not t or cached[0]._version != cached[1]:
                module._mucutlass_bound[d["name"]] = (t, t._version, _as_declared(t, d))
            out[d["name"]] = module._mucutlass_bound[d["name"]][2]
    return out


# the submodules the program's `module` steps call, by path
_MODULE_PATHS = list(dict.fromkeys(k["value"] for s in PROGRAM["steps"] if s.get("fn") == "module" for k in s["kwargs"]
                                   if k["key"] == "path"))


def _modules_of(module):
    # path "" is the whole model: the problem's own forward (ModelNew's would run this program again)
    return {p: module.get_submodule(p) if p else (lambda *a: super(ModelNew, module).forward(*a)) for p in _MODULE_PATHS}
'''

_WITH_MODEL = r'''

class ModelNew(Model):
    """The problem's Model, with forward running the μCUTLASS program on CUTLASS kernels."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._mucutlass_bound = {}
        self._mucutlass_graphs = ProgramGraphs(run_program) if CUDA_GRAPH else None

    def forward(self, *inputs):
        if self._mucutlass_graphs is not None:  # never for a program with `module` steps (see export_model_new)
            outs = self._mucutlass_graphs(list(inputs), _params_of(self))
        else:
            outs = run_program(list(inputs), _params_of(self), _modules_of(self))
        return outs[0] if len(outs) == 1 else tuple(outs)
'''

_WITHOUT_MODEL = r'''

class ModelNew(torch.nn.Module):
    """Runs the μCUTLASS program on CUTLASS kernels; parameters named by their state_dict keys."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self._mucutlass_bound = {}
        self._mucutlass_graphs = ProgramGraphs(run_program) if CUDA_GRAPH else None
        for d in PROGRAM["decls"]:
            if d["kind"] == "param":
                owner = self
                *path, leaf = d["source"].split(".")
                for part in path:
                    if not hasattr(owner, part):
                        owner.add_module(part, torch.nn.Module())
                    owner = getattr(owner, part)
                owner.register_parameter(leaf, torch.nn.Parameter(torch.empty(d["shape"], dtype=TORCH_DTYPE[d["dtype"]])))

    def forward(self, *inputs):
        outs = (self._mucutlass_graphs or run_program)(list(inputs), _params_of(self))
        return outs[0] if len(outs) == 1 else tuple(outs)
'''


_RUNNER_IMPORTS = ("json", "os")  # what _RUNNER needs beyond the runtime block's own imports


def portable_runtime_source() -> str:
    text = inspect.getsource(cutlass_runtime)
    begin = text.index("# --- portable begin")
    end = text.index("# --- portable end ---")
    return text[text.index("\n", begin) + 1:end]


def _imports() -> str:
    """The runtime module's plain ``import`` lines (what its portable block uses) and the runner's."""
    head = inspect.getsource(cutlass_runtime).split("# --- portable begin")[0]
    modules = {line.split()[1] for line in head.splitlines() if line.startswith("import ")} | set(_RUNNER_IMPORTS)
    return "".join(f"import {m}\n" for m in sorted(modules - {"torch"})) + "\nimport torch\n"


def export_model_new(program: Program, artifacts: dict[str, str], path: str | Path, problem_source: str | None = None,
                     copy_libraries: bool = True, options: RuntimeOptions | None = None) -> Path:
    """Write ``path``: a Python module defining ``ModelNew`` that runs ``program`` from ``artifacts``.

    With ``copy_libraries`` the kernel libraries are copied next to the file (``<stem>_kernels/``),
    so the file and that folder can be moved together; otherwise the file points at the cache.
    ``options`` (default: off) carries the CUDA graph and fused casts into the file; fused casts need the
    library among the artifacts (``build.build_program`` adds it when they are on), else they stay steps."""
    path = Path(path)
    options = options or RuntimeOptions()
    emitted, diags = emit_program(program)
    if diags:
        raise ValueError("the program has kernels the CUTLASS backend cannot build: " + "; ".join(d.message for d in diags))
    libraries = [(e.kernel_name, e.kernel_name, dataclasses.asdict(e.abi)) for e in emitted]
    for e in emitted:
        if e.kernel_name not in artifacts:
            raise ValueError(f"no built library for kernel '{e.kernel_name}': run build.build_program first")
    cast_jobs = [j.as_dict() for j in fused_cast.plan_input_casts(program)] if options.fused_casts else []
    if cast_jobs and fused_cast.ARTIFACT in artifacts:
        libraries.append((fused_cast.ARTIFACT, "fused_cast", None))
    else:
        cast_jobs = []
    kernels = {}
    for name, stem, abi in libraries:
        lib = str(Path(artifacts[name]).resolve())
        local = ""
        if copy_libraries:
            folder = path.parent / f"{path.stem}_kernels"
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(lib, folder / f"{stem}.so")
            local = f"{folder.name}/{stem}.so"
        kernels[name] = {"lib": lib, "local": local, "abi": abi}
    # a `module` step runs the model's own Python, which may sync with the host or branch on values: no graph
    graph = options.cuda_graph and not module_paths(program)
    runtime = {"cuda_graph": graph, "fused_casts": cast_jobs}
    program_json = json.dumps(program.model_dump(mode="json"))
    parts = [
        f'"""ModelNew for μCUTLASS program {program.name or "(unnamed)"}: CUTLASS kernels for sm_90a, '
        'generated by mucutlass."""\n',
        _imports(),
    ]
    if problem_source is not None:
        parts.append("\n# ---- the problem's source (defines Model) ----\n" + problem_source.rstrip() + "\n# ---- end of the problem's source ----\n")
    parts.append("\n" + portable_runtime_source())
    parts.append(_RUNNER.replace("__PROGRAM__", repr(program_json)).replace("__KERNELS__", repr(json.dumps(kernels)))
                 .replace("__RUNTIME__", repr(json.dumps(runtime))))
    parts.append(_WITH_MODEL if problem_source is not None else _WITHOUT_MODEL)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts))
    return path


_INTERPRETED = r'''
from dsl_compiler import interpreter as _interpreter
from dsl_compiler.ir import Program as _Program
from dsl_compiler.runtime import module_paths as _module_paths

PROGRAM = _Program.model_validate_json(__PROGRAM__)
_MODULE_PATHS = _module_paths(PROGRAM)


def _params_of(module):
    state = module.state_dict()
    return {d.name: state[d.source or d.name] for d in PROGRAM.params}


class ModelNew(__BASE__):
    """__DOC__"""

    def forward(self, *inputs):
        outs = _interpreter.run(PROGRAM, list(inputs), _params_of(self), {p: self.get_submodule(p) for p in _MODULE_PATHS})
        return outs[0] if len(outs) == 1 else tuple(outs)
'''


def export_model_interpreted(program: Program, path: str | Path, problem_source: str | None = None) -> Path:
    """Write ``path``: a Python module defining ``ModelNew`` that runs ``program`` on mucutlass's reference interpreter
    (what the interpreter backend has instead of built kernels). It needs mucutlass installed. Given the problem's
    source, ``ModelNew`` subclasses its ``Model``; otherwise it creates the declared parameters (load a state_dict)."""
    path = Path(path)
    parts = [f'"""ModelNew for μCUTLASS program {program.name or "(unnamed)"}: runs on mucutlass\'s reference '
             'interpreter (no CUDA kernels were built), generated by mucutlass."""\n', "\nimport torch\n"]
    if problem_source is not None:
        parts.append("\n# ---- the problem's source (defines Model) ----\n" + problem_source.rstrip()
                     + "\n# ---- end of the problem's source ----\n")
        base, doc = "Model", "The problem's Model, with forward running the μCUTLASS program on the interpreter."
    else:
        base, doc = "torch.nn.Module", "Runs the μCUTLASS program on the interpreter; parameters by state_dict key."
    body = (_INTERPRETED.replace("__PROGRAM__", repr(program.model_dump_json()))
            .replace("__BASE__", base).replace("__DOC__", doc))
    if problem_source is None:
        body += _DECLARED_PARAMS
    parts.append(body)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts))
    return path


_DECLARED_PARAMS = r'''
    def __init__(self, *args, **kwargs):
        super().__init__()
        for d in PROGRAM.params:
            owner = self
            *path, leaf = (d.source or d.name).split(".")
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            owner.register_parameter(leaf, torch.nn.Parameter(torch.empty(d.shape)))
'''
