"""Cold build time of N kernel variants: all in one translation unit against one unit each (side by
side on the host's cores), each in a fresh kernel cache. The variants are the distinct kernels of the
offline tier's candidates for one problem (what a run of that problem builds).

    python3 benchmarks/bench_build.py --out DIR [--problem PATH] [--n 8] [--modes unit,separate,unit-split-4] [--together]

Writes DIR/build.json and DIR/build.md: per mode the wall time, nvcc's CPU time (all its processes),
and both per kernel. ``--together`` runs the modes at the same time (one nvcc per unit, so a host with
more cores than units runs both undisturbed), which halves the command's wall time. ``unit-split-N``:
one unit with ``--split-compile=N`` (nvcc runs the device optimisation of the unit's kernels on N threads).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_PROBLEM = ROOT / "evals" / "suites" / "builtin" / "20_conv2d_bias_relu.py"


def variants(problem_path: str, n: int, gpu: str = "h200") -> list:
    """Programs of the offline tier's candidates, the first ``n`` with a distinct kernel source."""
    from dsl_compiler.cutlass.emit import emit_program
    from evals.problems import load_problem
    from nodes.offline.policy import OfflineTier

    seen, out = set(), []
    for c in OfflineTier().candidates(load_problem(problem_path), gpu):
        emitted, diags = emit_program(c.program)
        if diags or len(emitted) != 1 or emitted[0].source in seen:
            continue
        seen.add(emitted[0].source)
        out.append(c.program)
        if len(out) == n:
            break
    return out


def _child(mode: str, problem: str, n: int) -> dict:
    """One mode in this process (a fresh cache given by the parent): build and time."""
    import resource

    from dsl_compiler import build

    progs = variants(problem, n)
    if mode == "separate":
        os.environ["MUCUTLASS_KERNELS_PER_UNIT"] = "1"
    else:
        os.environ["MUCUTLASS_KERNELS_PER_UNIT"] = str(max(1, len(progs)))
    if mode.startswith("unit-split"):  # nvcc's device optimisation of the unit's kernels on several threads
        os.environ["MUCUTLASS_NVCC_FLAGS"] = f"--split-compile={mode.rsplit('-', 1)[1] if mode.count('-') == 2 else 0}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    first = build.build_program(progs[0], ahead=progs[1:])
    build.wait_ahead()
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    results = [build.build_program(p) for p in progs]  # every variant is in the cache now
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    kernels = len(progs)
    return {
        "mode": mode, "kernels": kernels, "ok": first.ok and all(r.ok and r.cached for r in results),
        "wall_s": round(wall_s, 1), "nvcc_cpu_s": round(cpu_s, 1),
        "wall_s_per_kernel": round(wall_s / kernels, 1), "nvcc_cpu_s_per_kernel": round(cpu_s / kernels, 1),
        "diagnostics": [d.message for r in [first, *results] for d in r.diagnostics][:5],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/mucutlass-bench-build"))
    ap.add_argument("--problem", default=str(DEFAULT_PROBLEM))
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--modes", default="unit,separate")
    ap.add_argument("--together", action="store_true", help="run the modes at the same time")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.problem, args.n)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    procs = {}
    rows = []
    for mode in args.modes.split(","):
        cache = tempfile.mkdtemp(prefix=f"mucutlass-bench-{mode}-")
        env = {**os.environ, "MUCUTLASS_CACHE_DIR": cache, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        cmd = [sys.executable, __file__, "--child", mode, "--problem", args.problem, "--n", str(args.n)]
        procs[mode] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        if not args.together:
            rows.append(_collect(mode, procs.pop(mode)))
    rows += [_collect(mode, p) for mode, p in procs.items()]
    data = {"host_cores": os.cpu_count(), "problem": Path(args.problem).name, "together": args.together, "rows": rows}
    (out / "build.json").write_text(json.dumps(data, indent=1))
    lines = [f"# Cold builds of {args.n} variants ({Path(args.problem).name}), {os.cpu_count()} cores"
             + (", modes side by side" if args.together else ""), "",
             "| mode | kernels | wall s | wall s / kernel | nvcc CPU s | CPU s / kernel | ok |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r.get('kernels', '-')} | {r.get('wall_s', '-')} | {r.get('wall_s_per_kernel', '-')} | "
                     f"{r.get('nvcc_cpu_s', '-')} | {r.get('nvcc_cpu_s_per_kernel', '-')} | {r.get('ok', False)} |")
    (out / "build.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r.get("ok") for r in rows) else 1


def _collect(mode: str, proc: subprocess.Popen) -> dict:
    stdout, _ = proc.communicate()
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"mode": mode, "ok": False, "error": f"exit {proc.returncode}"}


if __name__ == "__main__":
    sys.exit(main())
