"""Run built CUTLASS kernels on torch tensors.

Each kernel's shared library is loaded once per process (ctypes) and called through its C ABI
(see ``cutlass.emit``) on torch's current CUDA stream, with outputs and the workspace allocated by
torch's caching allocator. A non-zero status becomes ``CutlassError`` carrying CUTLASS's own text.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import math
import os
import threading
import time

import torch

from dsl_compiler.cutlass.emit import emit_program
from dsl_compiler.ir import Kernel, Program

# --- portable begin: torch and the standard library only; export.py copies this block, with this module's plain imports, into ModelNew files ---
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
STORE_DTYPE = {**TORCH_DTYPE, "i64": torch.int64}  # a row kernel's stores (argmax / argmin write indices)
_MSG_LEN = 512
_LIBS: dict = {}
_LIBS_LOCK = threading.Lock()
_ENTRIES: dict = {}  # (library, symbol) -> its entry points
load_seconds: dict = {}  # path -> seconds its first load took


class CutlassError(RuntimeError):
    """A CUTLASS kernel refused or failed to run; the message carries CUTLASS's status text."""


class LibraryDigestError(RuntimeError):
    """A kernel library that differs from the one its build recorded next to it; it is never loaded."""


def check_library_digest(path):
    """Compare ``path`` with the SHA-256 its build recorded in ``digest.json`` beside it (the kernel cache
    writes one per entry); a library without a record there (an exported copy) has nothing to compare."""
    try:
        with open(os.path.join(os.path.dirname(path), "digest.json")) as fh:
            recorded = json.load(fh).get(os.path.basename(path))
    except (OSError, ValueError, AttributeError):
        return
    if recorded is None:
        return
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    if h.hexdigest() != recorded:
        raise LibraryDigestError(f"{path}: differs from the library built there (digest mismatch); not loading it")


def load_library(path, symbol=""):
    """dlopen a kernel library once per process and declare one kernel's C ABI: its entry points
    ``mucutlass_run_<symbol>`` (a library built from a unit of several kernels exports one pair per
    kernel), else the plain ``mucutlass_run`` of a one-kernel library. Returns an object with the
    two entry points as ``mucutlass_workspace_size`` and ``mucutlass_run``."""
    with _LIBS_LOCK:
        lib = _LIBS.get(path)
        if lib is None:
            t0 = time.perf_counter()
            check_library_digest(path)  # a library swapped in the cache since its build is never loaded
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
            _LIBS[path] = lib
            load_seconds[path] = time.perf_counter() - t0
        entry = _ENTRIES.get((path, symbol))
        if entry is None:
            names = [f"mucutlass_workspace_size_{symbol}", f"mucutlass_run_{symbol}"] if symbol else []
            if not names or not all(hasattr(lib, n) for n in names):
                names = ["mucutlass_workspace_size", "mucutlass_run"]
            ws, run = getattr(lib, names[0]), getattr(lib, names[1])
            vpp, i64p, f32p = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_float)
            ws.argtypes = [vpp, i64p, f32p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p, ctypes.c_int]
            ws.restype = ctypes.c_int
            run.argtypes = [vpp, i64p, f32p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
            run.restype = ctypes.c_int
            entry = _ENTRIES[(path, symbol)] = _EntryPoints(ws, run)
        return entry


class _EntryPoints:
    __slots__ = ("mucutlass_workspace_size", "mucutlass_run")

    def __init__(self, workspace_size, run):
        self.mucutlass_workspace_size, self.mucutlass_run = workspace_size, run


def _row_major_ready(t):
    """Unit stride in the last dim and 16-byte aligned base and rows, as TMA needs; copies otherwise."""
    if t.dim() == 0:
        return t.reshape(1)
    ok = t.stride(-1) == 1 and t.data_ptr() % 16 == 0
    if ok and t.dim() >= 2:
        ok = (t.stride(-2) * t.element_size()) % 16 == 0 or t.shape[-2] == 1
    return t if ok else t.contiguous()


def _channels_last(t):
    """The tensor laid out N, *spatial, C in memory (logical shape unchanged)."""
    perm = (0, *range(2, t.dim()), 1)
    inner = t.permute(perm)
    if not inner.is_contiguous() or inner.data_ptr() % 16:
        inner = inner.contiguous()
    return _channels_last_view(inner)


def _channels_last_view(inner):
    d = inner.dim()
    return inner.permute(0, d - 1, *range(1, d - 1))


def _conv_out(size, f, s, p, d):
    return (size + 2 * p - d * (f - 1) - 1) // s + 1


def _conv_transpose_out(size, f, s, p, d, o):
    return (size - 1) * s - 2 * p + d * (f - 1) + o + 1


def _output(outputs, name, shape, dtype, device, channels_last=False):
    t = outputs.get(name)
    if t is None:
        if channels_last:
            n, k, *spatial = shape
            return _channels_last_view(torch.empty((n, *spatial, k), dtype=dtype, device=device))
        return torch.empty(shape, dtype=dtype, device=device)
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        raise CutlassError(f"output '{name}' must be {tuple(shape)} {dtype}, got {tuple(t.shape)} {t.dtype}")
    return t


def channel_slice(buf, shape, offset, total, conv):
    """A kernel's output ``shape`` as a view of channels ``offset``.. of ``buf``, whose rows (a GEMM's rows, a
    conv's output pixels) hold ``total`` channels each, densely: a channels-last conv output or a row-major
    [..., M, total]. Kernels storing into slices of one such tensor concatenate along channels for free."""
    if conv:
        stride, step = [1], total
        for extent in reversed(shape[2:]):
            stride.insert(1, step)
            step *= extent
        stride.insert(0, step)
    else:
        stride = [total, 1] if len(shape) >= 2 else [1]
        if len(shape) == 3:
            stride.insert(0, shape[1] * total)
    return buf.as_strided(tuple(shape), tuple(stride), buf.storage_offset() + offset)


def _slice_output(env, spec, shape, dtype, device, conv):
    """The tensor a slice store fills (allocated by its first writer, in that writer's form) and the view of
    this kernel's channels in it."""
    offset, total = spec["channels"]
    name, rows = spec["name"], 1
    for d in (shape[:1] + shape[2:]) if conv else shape[:-1]:
        rows *= d
    buf = env.get(name)
    if buf is None:
        full = list(shape)
        full[1 if conv else -1] = total
        buf = _output({}, name, tuple(full), dtype, device, channels_last=conv)
    elif buf.numel() != rows * total or buf.dtype != dtype:
        raise CutlassError(f"'{name}' must hold {rows} rows of {total} {dtype} channels, got {tuple(buf.shape)} {buf.dtype}")
    return buf, channel_slice(buf, shape, offset, total, conv)


def _check_dtype(kernel_name, name, t, dtype):
    if t.dtype != TORCH_DTYPE[dtype]:
        raise CutlassError(f"kernel '{kernel_name}': '{name}' is {t.dtype}, the kernel was built for {dtype}")


def gemm_call_args(kernel_name, op, abi, env, outputs):
    """Device tensors (ABI order), ints and results of a GEMM kernel. ``op`` and ``abi`` are plain dicts."""
    a, b = env[op["a"]["name"]], env[op["b"]["name"]]
    if a.dim() == 2 and b.dim() == 3:
        raise CutlassError(f"kernel '{kernel_name}': a rank-2 A with a rank-3 B is not a gemm")
    m, k = (a.shape[-1], a.shape[-2]) if op["a"]["transpose"] else (a.shape[-2], a.shape[-1])
    n = b.shape[-2] if op["b"]["transpose"] else b.shape[-1]
    batched = a.dim() == 3
    l = a.shape[0] if batched else 1
    full_shape = (l, m, n) if batched else (m, n)
    tensors, results = [], {}
    for spec in abi["tensors"]:
        role, name, dtype = spec["role"], spec["name"], TORCH_DTYPE[spec["dtype"]]
        if role in ("d", "store") and spec.get("channels"):
            results[name], t = _slice_output(env, spec, full_shape, dtype, a.device, False)
        elif role in ("d", "store"):
            t = results[name] = _output(outputs, name, full_shape, dtype, a.device)
        elif role == "reduce":
            shape = ((l, m) if batched else (m,)) if spec["reduce_fn"].startswith("row_") else ((l, n) if batched else (n,))
            t = results[name] = _output(outputs, name, shape, dtype, a.device)
        else:
            t = env[name]
            _check_dtype(kernel_name, name, t, spec["dtype"])
            t = _row_major_ready(t) if role != "scalar" else t.reshape(-1).contiguous()
            if role in ("src", "aux") and tuple(t.shape[-2:]) != (m, n):
                raise CutlassError(f"kernel '{kernel_name}': '{name}' must be [{m}, {n}] (or batched), got {tuple(t.shape)}")
            if role == "col" and t.shape[-1] != n:
                raise CutlassError(f"kernel '{kernel_name}': '{name}[col]' needs {n} values, got {tuple(t.shape)}")
            if role == "row" and t.shape[-1] != m:
                raise CutlassError(f"kernel '{kernel_name}': '{name}[row]' needs {m} values, got {tuple(t.shape)}")
        tensors.append(t)
    return tensors, _gemm_ints(abi, tensors, {"M": m, "N": n, "K": k, "L": l}), results


def _gemm_ints(abi, tensors, sizes):
    """The ints of a GEMM-form ABI: sizes by name (M, N, K, L), then ``p<i>.ld`` (leading dimension) and
    ``p<i>.bs`` (stride between batches or groups) of the tensors in ABI order."""
    ints = []
    sizes = {**sizes, **dict(abi.get("knob_values") or ())}  # run-time knobs (raster, swizzle, splits) by name
    for name in abi["ints"]:
        if name in sizes:
            ints.append(sizes[name])
            continue
        idx, what = name[1:].split(".")
        t, role = tensors[int(idx)], abi["tensors"][int(idx)]["role"]
        if what == "ld":
            ints.append(t.stride(-2) if t.dim() >= 2 else 0)
        else:  # batch stride; 0 shares one matrix or vector across the batch
            vector = role in ("col", "row", "reduce")
            ints.append(t.stride(0) if t.dim() == (2 if vector else 3) else 0)
    return ints


def grouped_call_args(kernel_name, op, abi, env, outputs):
    """Device tensors (ABI order), ints and results of a grouped GEMM: A [T, K] in row groups, B [G, K, N]
    (or [G, N, K] read transposed), D [T, N]; row vectors have T values, column vectors N."""
    a, b = env[op["a"]["name"]], env[op["b"]["name"]]
    if a.dim() != 2 or b.dim() != 3:
        raise CutlassError(f"kernel '{kernel_name}': grouped_gemm needs A [T, K] and B [G, K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    t_rows, k = a.shape
    g, n = b.shape[0], (b.shape[-2] if op["b"]["transpose"] else b.shape[-1])
    if sum(op["group_sizes"]) != t_rows or len(op["group_sizes"]) != g:
        raise CutlassError(f"kernel '{kernel_name}': built for group sizes {tuple(op['group_sizes'])}, got A with {t_rows} rows "
                           f"and B with {g} matrices")
    tensors, results = [], {}
    for spec in abi["tensors"]:
        role, name = spec["role"], spec["name"]
        if role == "d":
            t = results[name] = _output(outputs, name, (t_rows, n), TORCH_DTYPE[spec["dtype"]], a.device)
        else:
            t = env[name]
            _check_dtype(kernel_name, name, t, spec["dtype"])
            if role in ("a", "b", "src"):
                t = _row_major_ready(t)
                if role == "src" and tuple(t.shape) != (t_rows, n):
                    raise CutlassError(f"kernel '{kernel_name}': '{name}' must be [{t_rows}, {n}], got {tuple(t.shape)}")
            else:  # kept as is when already a flat vector, so the call plan can be reused
                t = t if t.dim() == 1 and t.is_contiguous() else t.reshape(-1).contiguous()
                want = {"col": n, "row": t_rows, "scalar": 1}[role]
                if t.numel() != want:
                    raise CutlassError(f"kernel '{kernel_name}': '{name}[{role}]' needs {want} values, got {t.numel()}")
        tensors.append(t)
    return tensors, _gemm_ints(abi, tensors, {"M": t_rows, "N": n, "K": k, "L": g}), results


def conv_call_args(kernel_name, op, abi, env, outputs):
    """Device tensors (channels-last), ints and results of a convolution kernel."""
    x, w = env[op["x"]["name"]], env[op["w"]["name"]]
    nd = op["spatial_dims"]
    n, c, *sp = x.shape
    kk, kg, *flt = w.shape

    def pad3(v, fill):  # (d, h, w) order
        return [fill] * (3 - nd) + list(v)

    trs = pad3(flt, 1)
    if op["kind"] == "conv_transpose":
        # dgrad states the problem from its output (CUTLASS's activation dx): extents and channels are the output's,
        # the filter [C_in, *filter, C_out] is CUTLASS's [K, T, R, S, C]
        kk = kg * op["groups"]
        out_sp = [_conv_transpose_out(s, f, st, p, d, o) for s, f, st, p, d, o in
                  zip(sp, flt, op["stride"], op["padding"], op["dilation"], op["output_padding"])]
        act_sp, act_c, flt_k = out_sp, kk, c
    else:
        out_sp = [_conv_out(s, f, st, p, d) for s, f, st, p, d in zip(sp, flt, op["stride"], op["padding"], op["dilation"])]
        act_sp, act_c, flt_k = sp, c, kk
    dhw = pad3(act_sp, 1)
    ints = [n, dhw[0], dhw[1], dhw[2], act_c, flt_k, trs[0], trs[1], trs[2], *pad3(op["padding"], 0),
            *pad3(op["stride"], 1), *pad3(op["dilation"], 1)]
    out_shape = (n, kk, *out_sp)
    tensors, results = [], {}
    for spec in abi["tensors"]:
        role, name = spec["role"], spec["name"]
        if role == "d" and spec.get("channels"):
            results[name], t = _slice_output(env, spec, out_shape, TORCH_DTYPE[spec["dtype"]], x.device, True)
        elif role == "d":
            t = _output(outputs, name, out_shape, TORCH_DTYPE[spec["dtype"]], x.device, channels_last=True)
            if not t.permute(0, *range(2, t.dim()), 1).is_contiguous():
                raise CutlassError(f"output '{name}' must be channels-last")
            results[name] = t
        else:
            t = env[name]
            _check_dtype(kernel_name, name, t, spec["dtype"])
            if role in ("x", "w", "src"):
                if role == "src" and tuple(t.shape) != out_shape:
                    raise CutlassError(f"kernel '{kernel_name}': '{name}' must be {out_shape}, got {tuple(t.shape)}")
                t = _channels_last(t)
            else:
                t = t.reshape(-1).contiguous()
                if role == "col" and t.numel() != kk:
                    raise CutlassError(f"kernel '{kernel_name}': '{name}[col]' needs {kk} values, got {t.numel()}")
        tensors.append(t)
    for extra in abi["ints"][len(ints):]:  # "p<i>.ld": the pixel stride of a slice store's output
        ints.append(tensors[int(extra[1:].split(".")[0])].stride(-1))
    return tensors, ints, results


_PLANS: dict = {}  # (library, kernel, input signature) -> a call plan reused while the inputs keep their layout


_OUTPUT_ROLES = ("d", "store", "reduce")  # ABI tensors the kernel writes (allocated per call); the rest are inputs


def row_call_args(kernel_name, op, abi, env, outputs):
    """A row kernel's pointers (x, affine, tail tensors, stores), its ints (outer, rows, inner) and its stores."""
    x = env[op["x"]["name"]]
    if not x.is_contiguous():
        x = x.contiguous()
    outer, rows, inner = abi["row_geometry"]  # fixed with the program's shapes when it was emitted
    out_shape = tuple(abi["row_out_shape"])
    if x.numel() != outer * rows * inner:
        raise CutlassError(f"kernel '{kernel_name}': '{op['x']['name']}' has {x.numel()} elements, the program "
                           f"declares {outer * rows * inner}")
    tensors, results = [], {}
    for spec in abi["tensors"]:
        name, role = spec["name"], spec["role"]
        if role == "x":
            tensors.append(x)
        elif role == "store":
            t = results[name] = _output(outputs, name, out_shape, STORE_DTYPE[spec["dtype"]], x.device)
            tensors.append(t)
        else:
            t = env[name]
            if role == "src" and tuple(t.shape) != tuple(out_shape):
                raise CutlassError(f"kernel '{kernel_name}': '{name}' must be {out_shape}, got {tuple(t.shape)}")
            tensors.append(t.contiguous())
    return tensors, [outer, rows, inner], results


def _signature(abi, env):
    inputs = (env[t["name"]] for t in abi["tensors"] if t["role"] not in _OUTPUT_ROLES)
    return tuple((tuple(t.shape), t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0) for t in inputs)


def call_kernel(lib_path, kernel_name, op, abi, env, outputs=None):
    """Run one built kernel on torch's current stream; returns store name -> tensor.

    The first call with a given input signature (shapes, strides, dtypes) prepares the arguments
    in full; later calls reuse that plan (sizes, strides, workspace size) and only gather pointers
    and allocate outputs, which keeps the host cost per launch to a few microseconds."""
    lib = load_library(lib_path, abi.get("symbol", ""))
    key = (lib_path, kernel_name, _signature(abi, env))
    plan = _PLANS.get(key) if not outputs else None
    if plan is not None:
        c_ints, c_scalars, ws_bytes, out_specs, device = plan
        results = {}
        ptr_values = []
        for spec, shape_info in zip(abi["tensors"], out_specs):
            if shape_info is None:
                ptr_values.append(env[spec["name"]].data_ptr())
            elif spec.get("channels"):
                shape, _, dtype = shape_info
                results[spec["name"]], t = _slice_output(env, spec, shape, dtype, device,
                                                              op["kind"] in ("conv", "conv_transpose"))
                ptr_values.append(t.data_ptr())
            else:
                shape, stride, dtype = shape_info
                t = results[spec["name"]] = torch.empty_strided(shape, stride, dtype=dtype, device=device)
                ptr_values.append(t.data_ptr())
    else:
        build_args = {"conv": conv_call_args, "conv_transpose": conv_call_args, "grouped_gemm": grouped_call_args,
                      "row": row_call_args}.get(op["kind"], gemm_call_args)
        tensors, ints, results = build_args(kernel_name, op, abi, env, outputs or {})
        device = tensors[0].device
        ptr_values = [t.data_ptr() for t in tensors]
        c_ints = (ctypes.c_int64 * max(1, len(ints)))(*ints)
        c_scalars = (ctypes.c_float * max(1, len(abi["scalars"])))(*abi["scalars"])
        ws = ctypes.c_size_t(0)
        msg = ctypes.create_string_buffer(_MSG_LEN)
        ptrs = (ctypes.c_void_p * len(ptr_values))(*ptr_values)
        if lib.mucutlass_workspace_size(ptrs, c_ints, c_scalars, ctypes.byref(ws), msg, _MSG_LEN):
            raise CutlassError(f"kernel '{kernel_name}': {msg.value.decode(errors='replace')}")
        ws_bytes = ws.value
        # reusable only when every input was used in place (no layout copy was needed)
        inputs_in_place = all(t is env.get(spec["name"]) for spec, t in zip(abi["tensors"], tensors)
                              if spec["role"] not in _OUTPUT_ROLES)
        if inputs_in_place:
            out_specs = [None if spec["role"] not in _OUTPUT_ROLES else (tuple(t.shape), t.stride(), t.dtype)
                         for spec, t in zip(abi["tensors"], tensors)]
            _PLANS[key] = (c_ints, c_scalars, ws_bytes, out_specs, device)
    ptrs = (ctypes.c_void_p * len(ptr_values))(*ptr_values)
    workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=device) if ws_bytes else None
    stream = torch.cuda.current_stream(device).cuda_stream
    msg = ctypes.create_string_buffer(_MSG_LEN)
    run_args = (ptrs, c_ints, c_scalars, workspace.data_ptr() if ws_bytes else None, ws_bytes, stream, msg, _MSG_LEN)
    if device.index is not None and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            status = lib.mucutlass_run(*run_args)
    else:
        status = lib.mucutlass_run(*run_args)
    if status:
        raise CutlassError(f"kernel '{kernel_name}': CUTLASS {msg.value.decode(errors='replace')}")
    return results

# --- fused casts: the C ABI of the fused-cast library (MucutlassCastJob, MucutlassCastJobs in its source) ---
_CAST_TYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_CAST_MAX_JOBS, _CAST_THREADS, _CAST_VEC, _CAST_TILE = 16, 256, 8, 64


class _CastJob(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("dst", ctypes.c_void_p), ("outer", ctypes.c_int64),
                ("channels", ctypes.c_int64), ("inner", ctypes.c_int64), ("channels_out", ctypes.c_int64),
                ("inner_out", ctypes.c_int64), ("first_block", ctypes.c_int64), ("src_type", ctypes.c_int32),
                ("dst_type", ctypes.c_int32), ("mode", ctypes.c_int32), ("vector", ctypes.c_int32)]


class _CastJobs(ctypes.Structure):
    _fields_ = [("job", _CastJob * _CAST_MAX_JOBS), ("count", ctypes.c_int32)]


def _cast_library(path):
    with _LIBS_LOCK:
        lib = _LIBS.get(path)
        if lib is None:
            check_library_digest(path)
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
            lib.mucutlass_fused_cast_job_bytes.restype = ctypes.c_int
            if lib.mucutlass_fused_cast_job_bytes() != ctypes.sizeof(_CastJob):
                raise CutlassError(f"{path}: fused-cast job layout differs from the runtime's")
            lib.mucutlass_fused_cast.argtypes = [ctypes.POINTER(_CastJobs), ctypes.c_int64, ctypes.c_void_p,
                                                 ctypes.c_char_p, ctypes.c_int]
            lib.mucutlass_fused_cast.restype = ctypes.c_int
            _LIBS[path] = lib
        return lib


def cast_geometry(job, shape):
    """(mode, outer, channels, inner, channels_out, inner_out, blocks) of one job on a source of ``shape``: a plain
    copy [outer, channels, inner] -> [outer, channels_out, inner_out] at 8 elements a thread; a layout copy of
    [N, C, *spatial] by 64x64 [C, positions] tiles, or a thread a position where it has 16 channels or fewer."""
    pad = list(job.get("pad") or ()) or [0] * len(shape)
    if job["relayout"]:
        n, c, positions = shape[0], shape[1], math.prod(shape[2:])
        c_out = c + pad[1]
        if c_out <= 16:
            return 2, n, c, positions, c_out, positions, -(-(n * positions) // _CAST_THREADS)
        return 1, n, c, positions, c_out, positions, n * -(-c_out // _CAST_TILE) * -(-positions // _CAST_TILE)
    dims = [1] * max(0, 2 - len(shape)) + list(shape)
    extra = [0] * max(0, 2 - len(shape)) + pad
    outer, channels, inner = math.prod(dims[:-2]), dims[-2], dims[-1]
    channels_out, inner_out = channels + extra[-2], inner + extra[-1]
    return 0, outer, channels, inner, channels_out, inner_out, -(-(outer * channels_out * inner_out) // (_CAST_THREADS * _CAST_VEC))


def run_fused_casts(lib_path, jobs, env):
    """The fused-cast plan's jobs (dicts) in one launch on the current stream:
    dst name -> tensor, each as its ``to`` / ``channels_last`` / ``pad`` steps give it. None when a source is not a
    dense, contiguous CUDA tensor of a carried type (the caller runs the steps themselves)."""
    sources = [env.get(j["src"]) for j in jobs]
    if not jobs or any(not isinstance(x, torch.Tensor) or x.device.type != "cuda" or x.dtype not in _CAST_TYPES
                       or not x.is_contiguous() or (j["relayout"] and x.dim() < 3) for x, j in zip(sources, jobs)):
        return None
    lib = _cast_library(lib_path)
    device = sources[0].device
    results = {}
    for start in range(0, len(jobs), _CAST_MAX_JOBS):
        batch = _CastJobs()
        blocks = 0
        for k, (j, x) in enumerate(zip(jobs[start:start + _CAST_MAX_JOBS], sources[start:start + _CAST_MAX_JOBS])):
            dtype = TORCH_DTYPE[j["dtype"]]
            mode, outer, channels, inner, channels_out, inner_out, job_blocks = cast_geometry(j, tuple(x.shape))
            pad = list(j.get("pad") or ()) or [0] * x.dim()
            shape = [s + e for s, e in zip(x.shape, pad)]
            if j["relayout"]:
                out = torch.empty((shape[0], *shape[2:], shape[1]), dtype=dtype, device=device)
                results[j["dst"]] = _channels_last_view(out)
            else:
                out = results[j["dst"]] = torch.empty(shape, dtype=dtype, device=device)
            job = batch.job[k]
            job.src, job.dst, job.outer, job.channels, job.inner = x.data_ptr(), out.data_ptr(), outer, channels, inner
            job.channels_out, job.inner_out, job.first_block = channels_out, inner_out, blocks
            job.src_type, job.dst_type, job.mode = _CAST_TYPES[x.dtype], _CAST_TYPES[dtype], mode
            job.vector = int(mode == 0 and not any(pad) and x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0)
            blocks += job_blocks
            batch.count = k + 1
        if blocks == 0:
            continue  # empty tensors: nothing to move
        msg = ctypes.create_string_buffer(_MSG_LEN)
        stream = torch.cuda.current_stream(device).cuda_stream
        with torch.cuda.device(device):
            status = lib.mucutlass_fused_cast(ctypes.byref(batch), blocks, stream, msg, _MSG_LEN)
        if status:
            raise CutlassError(msg.value.decode(errors="replace"))
    return results


def _dense(t):
    """Non-overlapping and dense in some dimension order (a copy into a same-strided buffer is exact)."""
    size = 1
    for stride, dim in sorted((st, d) for st, d in zip(t.stride(), t.shape) if d != 1):
        if stride != size:
            return False
        size *= dim
    return True


def graph_unsafe_reason(inputs):
    """Why a call cannot run from a CUDA graph now (empty when it can): work the caller is capturing
    itself, a dispatch mode that counts torch calls or the profiler (a replay would hide them), autograd,
    or inputs that are not dense CUDA tensors."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    if torch.cuda.is_current_stream_capturing():
        return "the caller is capturing a CUDA graph (its graph holds these launches)"
    if torch.utils._python_dispatch.is_in_torch_dispatch_mode() or torch._C._is_torch_function_mode_enabled():
        return "a torch dispatch or function mode is active (counting or profiling sees every call)"
    if torch.autograd._profiler_enabled():
        return "the profiler is on (it attributes each kernel to the call that launched it)"
    for x in inputs:
        if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
            return "an input is not a CUDA tensor"
        if x.requires_grad and torch.is_grad_enabled():
            return "an input requires grad"
        if not _dense(x):
            return "an input is not dense (a broadcast or overlapping view)"
    return ""


def cuda_graph_capture(run, static_inputs, params):
    """``run`` captured on ``static_inputs`` into a CUDA graph, after one warm-up call on a side stream (lazy
    initialisation and call plans stay outside the capture): (replay, the static outputs)."""
    device = static_inputs[0].device if static_inputs else torch.device("cuda", torch.cuda.current_device())
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        run(static_inputs, params)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_outputs = list(run(static_inputs, params))
    return graph.replay, static_outputs


class ProgramGraphs:
    """A program's whole launch sequence (kernels and torch steps) replayed from a CUDA graph.

    ``run(inputs, params) -> list of outputs`` is the eager program. The first call with an input
    signature (shapes, strides, dtypes, device) and params (their addresses and versions) runs eagerly;
    the second captures ``run`` on static copies of the inputs (``capture``, by default
    ``cuda_graph_capture``) and every later one copies its inputs into them, replays the graph and returns
    clones of the outputs, so nothing returned aliases a buffer the next replay overwrites. A call that
    cannot be captured (``graph_unsafe_reason``) runs eagerly; a capture that fails leaves that signature
    eager for good (``failures`` says why). At most ``max_graphs`` signatures are held (least recent
    dropped, with their memory pools)."""

    def __init__(self, run, max_graphs=4, capture=None, unsafe_reason=None):
        self.run = run
        self.max_graphs = max_graphs
        self.capture = capture or cuda_graph_capture
        self.unsafe_reason = unsafe_reason or graph_unsafe_reason
        self.graphs = {}  # signature -> (replay, static inputs, static outputs), least recently used first
        self.seen = set()
        self.failures = {}  # signature -> why its capture failed
        self.replays = 0
        self.last_reason = ""  # why the last call ran eagerly ("" when it replayed)

    @staticmethod
    def signature(inputs, params):
        return (tuple((tuple(x.shape), x.stride(), x.dtype, x.device) for x in inputs),
                tuple((k, v.data_ptr(), v._version) for k, v in sorted(params.items())))

    def __call__(self, inputs, params):
        reason = self.unsafe_reason(inputs)
        key = None if reason else self.signature(inputs, params)
        if key is not None and key in self.failures:
            reason = "capture failed: " + self.failures[key]
        elif key is not None and key not in self.graphs and key not in self.seen:
            self.seen.add(key)
            reason = "first call with these shapes (eager; the next one is captured)"
        if reason:
            self.last_reason = reason
            return self.run(inputs, params)
        entry = self.graphs.pop(key, None) or self._capture(key, inputs, params)
        if entry is None:
            self.last_reason = "capture failed: " + self.failures[key]
            return self.run(inputs, params)
        self.graphs[key] = entry  # most recently used last
        replay, static_inputs, static_outputs = entry
        for s, x in zip(static_inputs, inputs):
            s.copy_(x)
        replay()
        self.replays += 1
        self.last_reason = ""
        return [o.clone() for o in static_outputs]

    def _capture(self, key, inputs, params):
        static_inputs = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)
                         for x in inputs]
        try:
            replay, static_outputs = self.capture(self.run, static_inputs, params)
        except Exception as exc:  # noqa: BLE001 - a host sync or an uncapturable call: stay eager
            self.failures[key] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            if torch.cuda.is_available():
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001
                    pass
            return None
        while len(self.graphs) >= self.max_graphs:
            self.graphs.pop(next(iter(self.graphs)))
        return replay, static_inputs, static_outputs
# --- portable end ---


class CutlassExecutor:
    """Runs the kernels of one program from their built libraries."""

    def __init__(self, program: Program, artifacts: dict[str, str] | None):
        self.program = program
        self.artifacts = dict(artifacts or {})  # a program of PyTorch steps alone has nothing built
        emitted, diags = emit_program(program)
        if diags:
            raise CutlassError("; ".join(d.message for d in diags))
        self.abis: dict[str, dict] = {e.kernel_name: dataclasses.asdict(e.abi) for e in emitted}
        kernels = program.kernels + program.row_kernels
        missing = [k.name for k in kernels if k.name not in self.artifacts]
        if missing:
            raise CutlassError(f"no built library for kernel(s) {', '.join(missing)}: run build.build_program first")
        self._ops = {k.name: k.op.model_dump(mode="json") for k in kernels}

    def run_kernel(self, program: Program, kernel: Kernel, env: dict[str, torch.Tensor],
                   outputs: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Run one kernel on the tensors of ``env``; returns store name -> tensor.

        ``outputs`` may hold preallocated output tensors (the shapes, dtypes and layouts this
        would allocate), e.g. poisoned buffers in tests."""
        return call_kernel(self.artifacts[kernel.name], kernel.name, self._ops[kernel.name], self.abis[kernel.name],
                           env, outputs)

    def run_fused_casts(self, jobs: list[dict], env: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The input casts of ``jobs`` in one launch (``dsl_compiler.fused_cast``), or None where they cannot
        run so (the caller runs the steps). The library comes with the build's artifacts, else is built here."""
        from dsl_compiler import build, fused_cast

        path = self.artifacts.get(fused_cast.ARTIFACT)
        if path is None:
            path = self.artifacts[fused_cast.ARTIFACT] = str(build.build_fused_cast_library())
        return run_fused_casts(path, jobs, env)
