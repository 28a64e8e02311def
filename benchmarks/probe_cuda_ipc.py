"""Can a judge hand a candidate a GPU buffer of its own, across the candidate's sandbox?

The judge's transfers go through a host arena today: a 4 GiB output crosses GPU -> host -> GPU once per input
set. A GPU arena (a judge-owned device buffer the candidate opens once through CUDA IPC) would cross at device
bandwidth instead. This probe answers whether that works here, on the driver API alone (no runtime of our own):

1. the judge allocates a buffer with cuMemAlloc, fills it and exports a legacy IPC handle;
2. a candidate-like child opens the handle, checks the judge's bytes, writes its own, and closes it: once as a
   plain subprocess, once under the judge's supervisor with its sandbox (user, PID and mount namespaces);
3. the judge checks the child's bytes, and times a device-to-device copy and a device-host round trip of
   ``--copy-gib`` GiB (what the arena costs today).

Prints one JSON object (and writes it to --out when given).
Run from the repository root on a GPU host: python3 benchmarks/probe_cuda_ipc.py --out probe.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def _wrap(ptr: int, n: int):
    import torch

    class View:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3}

    return torch.as_tensor(View(), device="cuda")


def child(handle_hex: str, n: int) -> None:
    """The candidate's side: open the judge's handle, check its bytes, write our own, close it."""
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    cuda = ctypes.CDLL("libcuda.so.1")
    h = Handle()
    ctypes.memmove(ctypes.addressof(h), bytes.fromhex(handle_hex), 64)
    ptr = ctypes.c_uint64(0)
    t0 = time.perf_counter()
    rc = cuda.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, ctypes.c_uint(1))
    out = {"open_rc": rc, "open_s": time.perf_counter() - t0}
    if rc == 0:
        t = _wrap(ptr.value, n)
        out["saw_judge_bytes"] = bool((t == 7).all().item())
        t.fill_(42)
        torch.cuda.synchronize()
        out["close_rc"] = cuda.cuIpcCloseMemHandle(ctypes.c_uint64(ptr.value))
    sys.stderr.write("IPC_RESULT " + json.dumps(out) + "\n")
    sys.stderr.flush()


def _child_result(stderr: str) -> dict:
    for line in stderr.splitlines():
        if line.startswith("IPC_RESULT "):
            return json.loads(line[len("IPC_RESULT "):])
    return {"error": stderr[-600:]}


def probe(copy_gib: float) -> dict:
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    cuda = ctypes.CDLL("libcuda.so.1")
    n = 64 << 20
    ptr = ctypes.c_uint64(0)
    report: dict = {"torch": torch.__version__, "cuda": torch.version.cuda,
                    "gpu": torch.cuda.get_device_name(0), "uid": os.getuid()}
    report["alloc_rc"] = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n))
    buf = _wrap(ptr.value, n)
    h = Handle()
    report["export_rc"] = cuda.cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(ptr.value))
    hexh = ctypes.string_at(ctypes.addressof(h), 64).hex()

    env = {**os.environ}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    me = [sys.executable, os.path.abspath(__file__), "--child", hexh, str(n)]
    modes = {"plain": me}
    with tempfile.TemporaryDirectory() as work:
        # the candidate's folder is the supervisor's to remove
        modes["sandboxed"] = [sys.executable, "-m", "evals.judge.supervisor", "--workdir", tempfile.mkdtemp(), "--sandbox", "--",
                              *me]
        from evals.judge.sandbox import sandbox_available

        report["sandbox_available"] = sandbox_available()
        for name, cmd in modes.items():
            buf.fill_(7)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            # stdin stays open until the child is done: the supervisor ends its tree when the judge's pipe closes
            with open(os.path.join(work, f"{name}.err"), "w+") as err, open(os.path.join(work, f"{name}.out"), "w+") as so:
                p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=so, stderr=err, env=env, text=True)
                p.wait(timeout=120)
                p.stdin.close()
                err.seek(0)
                so.seek(0)
                stderr, stdout = err.read(), so.read()
            res = _child_result(stderr)
            torch.cuda.synchronize()
            res["judge_saw_child_bytes"] = bool((buf == 42).all().item())
            res["wall_s"] = round(time.perf_counter() - t0, 3)
            res["rc"] = p.returncode
            if name == "sandboxed":
                res["supervisor_stdout"] = stdout[-400:]
            report[name] = res
    del buf
    report["free_rc"] = cuda.cuMemFree_v2(ctypes.c_uint64(ptr.value))

    # what a transfer costs: device to device (a GPU arena) against device -> pinned host -> device (the arena)
    nbytes = int(copy_gib * (1 << 30))
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(3)
    dst = torch.empty_like(src)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    dst.copy_(src)
    torch.cuda.synchronize()
    report["d2d_gb_per_s"] = round(nbytes / (time.perf_counter() - t0) / 1e9, 1)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    t0 = time.perf_counter()
    host.copy_(src)
    torch.cuda.synchronize()
    mid = time.perf_counter()
    dst.copy_(host)
    torch.cuda.synchronize()
    report["d2h_pinned_gb_per_s"] = round(nbytes / (mid - t0) / 1e9, 1)
    report["h2d_pinned_gb_per_s"] = round(nbytes / (time.perf_counter() - mid) / 1e9, 1)
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    t0 = time.perf_counter()
    pageable.copy_(src)
    torch.cuda.synchronize()
    report["d2h_pageable_gb_per_s"] = round(nbytes / (time.perf_counter() - t0) / 1e9, 1)
    report["copy_gib"] = copy_gib
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copy-gib", type=float, default=4.0)
    ap.add_argument("--out", default="")
    ap.add_argument("--child", nargs=2, metavar=("HANDLE_HEX", "NBYTES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    report = probe(args.copy_gib)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    ok = all(report.get(m, {}).get("judge_saw_child_bytes") for m in ("plain", "sandboxed"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
