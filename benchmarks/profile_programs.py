"""Where a program's GPU time goes, step by step: for each problem of a finished `mucutlass eval`, the best program
(the fastest correct attempt, else the first that compiled) is built, run a few times, then profiled with
torch.profiler under one range per program step; every CUDA kernel is attributed to the step that launched it. Writes
<date>-<gpu>-profile-<suite>.{json,md} into --out: per problem a row per step (its name, kernel or torch, its op, GPU
us per call, its share of the call, the library kernels a torch step ran), the program's summed GPU time per call
beside the attempt's measured t_us, and the three steps that take the most.

    python3 benchmarks/profile_programs.py .cache/eval-models --suite models --out $OUT --budget-s 80

Without CUDA it runs the interpreter backend on the CPU and reports CPU profiler times (the steps' ranges), so the
attribution is tested without a GPU. The kernel cache (MUCUTLASS_CACHE_DIR) should be the one the evaluation built
into: each build is then a cache hit. Times are of calls back to back without an L2 flush, each step eager (the
profiler turns a program's CUDA graph off), so they are a little below the harness's t_us for GPU-bound programs
and above it for programs whose graph replay hid launch gaps.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime as dt
import functools
import gc
import io
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import gpu_slug, write_result  # noqa: E402

from evals.judge.timing import set_framework  # noqa: E402

STEP_RANGE = "mucutlass.step#"  # + the step's position in program.steps; -1: the fused input casts
CALL_RANGE = "mucutlass.call"
FUSED_CASTS = -1
TOP_STEPS = 3
MD_MAX_STEPS = 40  # a longer program's table shows its slowest steps (the JSON keeps every step)
# device events that are no work of a step: waits, and the GPU side of the ranges themselves
_NOT_WORK = re.compile(r"(^mucutlass\.)|( Sync$)")


# ---------------------------------------------------------------------------------------------
# Which program: the evaluation's attempts


@dataclass
class Choice:
    """The attempt a problem's profile runs: ``why`` says how it was chosen."""

    problem: str
    run_dir: Path
    attempt: dict
    why: str  # "fastest correct" or "no correct attempt: the first that compiled"
    program: Any  # the attempt's dsl_compiler.ir.Program


def problem_runs(eval_dir: Path) -> dict[str, list[Path]]:
    """Every run folder holding attempts.json, by problem name (summary.json's, else the folder's name)."""
    runs: dict[str, list[Path]] = defaultdict(list)
    for attempts in sorted((eval_dir / "runs").glob("**/attempts.json")):
        run_dir = attempts.parent
        name = None
        try:
            name = json.loads((run_dir / "summary.json").read_text()).get("problem")
        except (OSError, ValueError):
            pass
        runs[name or run_dir.relative_to(eval_dir / "runs").parts[0]].append(run_dir)
    return dict(runs)


def _read_attempts(run_dir: Path) -> list[dict]:
    try:
        rows = json.loads((run_dir / "attempts.json").read_text())
    except (OSError, ValueError):
        return []
    return [a for a in rows if isinstance(a, dict)] if isinstance(rows, list) else []


def _program(text: str):
    """The parsed program of an attempt's text, None where it is none (a cuda variant's ModelNew module)."""
    from dsl_compiler.parser import parse

    try:
        program, _ = parse(text)
    except Exception:  # noqa: BLE001 - text that is no program at all
        return None
    return program


def choose_attempt(problem: str, run_dirs: list[Path]) -> Choice | None:
    """The fastest correct attempt with a program over the problem's runs, else the first that compiled (each
    text parsed only as far as the choice needs: a long program takes a second)."""
    attempts = [(d, a) for d in run_dirs for a in _read_attempts(d) if a.get("program_text")]
    correct = sorted(((d, a) for d, a in attempts if a.get("correct") and a.get("t_us")),
                     key=lambda da: float(da[1]["t_us"]))
    for (run_dir, attempt), why in [*((da, "fastest correct") for da in correct),
                                    *((da, "no correct attempt: the first that compiled")
                                      for da in attempts if da[1].get("compile_ok") and not correct)]:
        program = _program(attempt["program_text"])
        if program is not None:
            return Choice(problem, run_dir, attempt, why, program)
    return None


@functools.lru_cache(maxsize=4)
def _suite(name: str) -> dict:
    from evals.problems import load_suite

    return {p.name: p for p in load_suite(name)}


def load_problem_of(name: str, suite: str | None, run_dir: Path):
    """The problem: by name from ``suite``, else from the path the run recorded (run.json)."""
    from evals.problems import load_problem

    if suite and name in _suite(suite):
        return _suite(suite)[name]
    path = json.loads((run_dir / "run.json").read_text())["problem_path"]
    return load_problem(path)


# ---------------------------------------------------------------------------------------------
# A program's steps


def step_facts(step) -> dict:
    """A step's name (a kernel's, a torch step's outputs), kind and op, as the program writes them."""
    from dsl_compiler import ir, printer

    if isinstance(step, ir.Kernel):
        op = step.op
        name = op.kind
        if isinstance(op, ir.ConvOp):
            name = op.fn + (f" groups={op.groups}" if op.groups > 1 else "")
        return {"name": step.name, "kind": "kernel", "op": name, "line": printer.format_op(op)[:160]}
    fn = step.fn
    if fn == "module":
        fn += " " + next((str(k.value) for k in step.kwargs if k.key == "path"), "")
    return {"name": ", ".join(step.outputs), "kind": "torch", "op": fn,
            "line": printer.format_torch_step(step)[:160]}


def build_module(program, problem, backend: str, device):
    """The program as the harness runs it: built (a kernel cache hit after the evaluation), its params (and the
    submodules its ``module`` steps call) bound from the problem's Model, the runtime options of the evaluation's
    environment. Returns (module, inputs, build facts)."""
    from dsl_compiler import runtime
    from sol_models.estimate import runtime_options

    facts: dict[str, Any] = {}
    artifacts = None
    if backend == "cutlass":
        from dsl_compiler.build import build_program

        result = build_program(program)
        facts = {"build_s": result.seconds, "build_cached": result.cached}
        if not result.ok:
            first = result.diagnostics[0].message if result.diagnostics else "build failed"
            raise RuntimeError(f"build failed: {first}")
        artifacts = result.artifacts
    model = problem.make_model(seed=0, device=device)
    modules = runtime.bind_modules(program, model) if runtime.module_paths(program) else None
    params = runtime.bind_params(program, model)
    options = runtime_options(program)
    facts["runtime_options"] = options.reason
    module = runtime.load(program, backend, params, artifacts, modules=modules, options=options).to(device)
    return module, problem.make_inputs(seed=0, device=device), facts


# ---------------------------------------------------------------------------------------------
# The profile and its attribution


def profile_calls(module, inputs: list, calls: int, cuda: bool):
    """``calls`` calls of ``module`` under the profiler, each in a CALL_RANGE and each step in a STEP_RANGE named by
    its position in the program. Returns the profiler's events."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    position = {id(s): i for i, s in enumerate(module.program.steps)}

    def scope(step):
        return record_function(f"{STEP_RANGE}{FUSED_CASTS if step is None else position[id(step)]}")

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    module.step_scope = scope
    try:
        with profile(activities=activities) as prof:
            for _ in range(calls):
                with record_function(CALL_RANGE):
                    module(*inputs)
            if cuda:
                torch.cuda.synchronize()
    finally:
        module.step_scope = None
    return prof.events()


_RUNTIME_CALL = re.compile(r"^cu(da)?[A-Z]")  # cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernelEx, cudaMemcpyAsync


def warm_profiler(cuda: bool) -> None:
    """The profiler's first start in a process costs far more than later ones: taken here, outside every
    problem's profile."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        torch.zeros(8, device="cuda" if cuda else "cpu").add_(1)
        if cuda:
            torch.cuda.synchronize()
    prof.events()


def _is_cuda(event) -> bool:
    return str(getattr(event, "device_type", "")).rsplit(".", 1)[-1] == "CUDA"


class _Ranges:
    """Non-overlapping time ranges sorted by start (the steps of a call, or the calls): which one holds a time."""

    def __init__(self, spans: list[tuple[float, float, Any]]):
        self.spans = sorted(spans, key=lambda s: s[0])
        self.starts = [s[0] for s in self.spans]

    def at(self, t: float):
        i = bisect.bisect_right(self.starts, t) - 1
        if i >= 0 and t <= self.spans[i][1]:
            return self.spans[i][2]
        return None


class _Tally:
    """One attribution's sums: per step position us, launches and kernels by name; time between steps."""

    def __init__(self) -> None:
        self.step_us: dict[int, float] = defaultdict(float)
        self.launches: dict[int, int] = defaultdict(int)
        self.names: dict[int, Counter] = defaultdict(Counter)
        self.outside_us = 0.0  # inside a call, outside every step
        self.elsewhere_us = 0.0  # launched outside every call

    def add(self, position: int | None, in_call: bool, name: str, us: float) -> None:
        if position is not None:
            self.step_us[position] += us
            self.launches[position] += 1
            self.names[position][name] += us
        elif in_call:
            self.outside_us += us
        else:
            self.elsewhere_us += us

    def attributed_us(self) -> float:
        return sum(self.step_us.values()) + self.outside_us + self.elsewhere_us


def _by_launch(events, work: list, steps: _Ranges, calls: _Ranges) -> _Tally:
    """Each kernel (memcpy, memset) to the step whose range holds the host call that launched it (the runtime or
    driver call of the same correlation id): this sees launches made outside any PyTorch operator, as a CUTLASS
    kernel's from its library is."""
    launched_at = {e.id: e.time_range.start for e in events
                   if not _is_cuda(e) and _RUNTIME_CALL.match(e.name)}
    tally = _Tally()
    for k in work:
        t = launched_at.get(k.id)
        if t is not None:
            tally.add(steps.at(t), calls.at(t) is not None, k.name, k.time_range.elapsed_us())
    return tally


def _by_operator(events, step_ids: dict[int, int], call_ids: set[int], steps: _Ranges, calls: _Ranges) -> _Tally:
    """Each kernel to the step above the operator the profiler linked it to (``FunctionEvent.kernels``, as
    PyTorch's own device-time totals count)."""
    tally = _Tally()
    for e in events:
        if _is_cuda(e) or _RUNTIME_CALL.match(e.name):
            continue
        kernels = [k for k in (getattr(e, "kernels", None) or []) if not _NOT_WORK.search(k.name)]
        if not kernels:
            continue
        position, in_call, up = None, False, e
        while up is not None:  # the innermost step range above, else the call
            if id(up) in step_ids:
                position, in_call = step_ids[id(up)], True
                break
            if id(up) in call_ids:
                in_call = True
                break
            up = up.cpu_parent
        if up is None:  # no parents recorded: by time
            position, in_call = steps.at(e.time_range.start), calls.at(e.time_range.start) is not None
        for k in kernels:
            tally.add(position, in_call, k.name, float(k.duration))
    return tally


def attribute(events, calls: int, cuda: bool) -> dict:
    """Per step position: us per call, launches per call and the kernels (on the CPU: the operators) by us per call;
    the time inside the calls but outside every step; the device time no attribution placed; the total.

    On CUDA two attributions are made and the one that places more of the device time is kept (``method``):
    by the host call that launched each kernel (``_by_launch``), and by the operator the profiler linked it to
    (``_by_operator``). On the CPU a step's time is its range's duration and its operators are the range's direct
    children."""
    step_ids: dict[int, int] = {}
    call_ids: set[int] = set()
    step_spans, call_spans = [], []
    for e in events:
        if _is_cuda(e):
            continue
        if e.name.startswith(STEP_RANGE):
            step_ids[id(e)] = int(e.name[len(STEP_RANGE):])
            step_spans.append((e.time_range.start, e.time_range.end, step_ids[id(e)]))
        elif e.name == CALL_RANGE:
            call_ids.add(id(e))
            call_spans.append((e.time_range.start, e.time_range.end, True))
    steps, call_ranges = _Ranges(step_spans), _Ranges(call_spans)
    host_us = sum(end - start for start, end, _ in call_spans)
    method, unattributed_us = "cpu ranges", 0.0
    if cuda:
        work = [e for e in events if _is_cuda(e) and not _NOT_WORK.search(e.name)
                and not getattr(e, "is_user_annotation", False)]  # the GPU side of a record_function range
        device_us = sum(k.time_range.elapsed_us() for k in work)
        tallies = {"launch": _by_launch(events, work, steps, call_ranges),
                   "operator": _by_operator(events, step_ids, call_ids, steps, call_ranges)}
        method = max(tallies, key=lambda m: (tallies[m].attributed_us(), m == "launch"))
        tally = tallies[method]
        unattributed_us = max(0.0, device_us - tally.attributed_us())
        total_us = device_us
    else:
        tally = _Tally()
        for e in events:
            if id(e) in step_ids:
                tally.step_us[step_ids[id(e)]] += e.time_range.elapsed_us()
                tally.launches[step_ids[id(e)]] += 1
            elif e.cpu_parent is not None and id(e.cpu_parent) in step_ids:
                tally.names[step_ids[id(e.cpu_parent)]][e.name] += e.time_range.elapsed_us()
        tally.outside_us = max(0.0, host_us - sum(tally.step_us.values()))
        total_us = host_us
    per = 1.0 / max(calls, 1)
    return {
        "method": method,
        "step_us": {p: us * per for p, us in tally.step_us.items()},
        "launches": {p: n * per for p, n in tally.launches.items()},
        "names": {p: [(n, us * per) for n, us in c.most_common()] for p, c in tally.names.items()},
        "outside_steps_us": tally.outside_us * per,
        "unattributed_us": (unattributed_us + tally.elsewhere_us) * per,
        "total_us": total_us * per,
        "host_us": host_us * per,
    }


def _short(kernel: str, limit: int = 100) -> str:
    """A library kernel's name, shortened: a C++ name loses its call arguments and its template arguments below
    the first level (``cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>``)."""
    text = re.sub(r"^void ", "", kernel).replace("(anonymous namespace)", "{anon}")
    if "::" in text:
        out, depth = [], 0
        for ch in text:
            if ch == "(" and depth == 0:
                break  # the call's argument list
            if ch == "<":
                depth += 1
                if depth == 2:
                    out.append("<...")
            if depth <= 1:
                out.append(ch)
            if ch == ">":
                if depth == 2:
                    out.append(">")
                depth = max(0, depth - 1)
        text = "".join(out)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def step_rows(program, stats: dict) -> list[dict]:
    """One row per step, in program order (the fused input casts first, where they ran)."""
    total = sum(stats["step_us"].values()) + stats["outside_steps_us"]
    rows = []
    positions = ([FUSED_CASTS] if FUSED_CASTS in stats["step_us"] else []) + list(range(len(program.steps)))
    for p in positions:
        if p == FUSED_CASTS:
            facts = {"name": "input casts", "kind": "torch", "op": "fused casts", "line": "one launch"}
        else:
            facts = step_facts(program.steps[p])
        us = stats["step_us"].get(p, 0.0)
        top = stats["names"].get(p, [])
        rows.append({
            "position": p, **facts, "us_per_call": us, "share": (us / total) if total > 0 else None,
            "launches_per_call": stats["launches"].get(p, 0.0),
            "top_kernels": [{"name": _short(n), "us_per_call": k_us} for n, k_us in top[:2]],
            "kernels_named": len(top),
        })
    return rows


def by_op(rows: list[dict]) -> list[dict]:
    """The steps' time summed by (kind, op), largest first: where a long program (the LSTM's 705 torch steps) goes."""
    sums: dict[tuple[str, str], list] = defaultdict(lambda: [0.0, 0])
    for r in rows:
        entry = sums[(r["kind"], r["op"])]
        entry[0] += r["us_per_call"]
        entry[1] += 1
    return [{"kind": k, "op": op, "us_per_call": us, "steps": n}
            for (k, op), (us, n) in sorted(sums.items(), key=lambda kv: -kv[1][0])]


def top_line(problem: str, steps: list[dict], correct: bool = True) -> str:
    """The three steps that take the most, in one line (for the results table's reasons); a program that was not
    correct says so first."""
    top = sorted((s for s in steps if s["us_per_call"] > 0), key=lambda s: -s["us_per_call"])[:TOP_STEPS]
    parts = [f"{s['name']} ({s['kind']} {s['op']}) {s['us_per_call']:.0f} us {100 * (s['share'] or 0):.0f}%"
             for s in top]
    return f"{problem}: " + ("" if correct else "(no correct attempt) ") + \
        ("; ".join(parts) if parts else "no step took measurable time")


# ---------------------------------------------------------------------------------------------
# One problem


def profile_problem(choice: Choice, suite: str | None, backend: str, warmup: int, calls: int) -> dict:
    """The row of one problem: its steps' times, or why there are none."""
    import torch

    attempt = choice.attempt
    row: dict[str, Any] = {"problem": choice.problem, "run_dir": str(choice.run_dir), "attempt": attempt.get("index"),
                           "chosen": choice.why, "correct": bool(attempt.get("correct")),
                           "t_us": attempt.get("t_us"), "timing_source": attempt.get("timing_source"),
                           "precision": attempt.get("precision")}
    program = choice.program
    row.update({"kernels": len(program.kernels), "torch_steps": len(program.torch_steps)})
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    started = time.perf_counter()
    problem = load_problem_of(choice.problem, suite, choice.run_dir)
    set_framework()  # the numerics the judge runs candidates under
    module, inputs, facts = build_module(program, problem, backend, device)
    row.update(facts)
    for _ in range(warmup):
        module(*inputs)
    if cuda:
        torch.cuda.synchronize()
    stats = attribute(profile_calls(module, inputs, calls, cuda), calls, cuda)
    steps = step_rows(program, stats)
    row.update({
        "status": "profiled", "time_source": "cuda" if cuda else "cpu", "attribution": stats["method"],
        "calls_profiled": calls,
        "gpu_us_per_call": sum(s["us_per_call"] for s in steps) + stats["outside_steps_us"],
        "outside_steps_us": stats["outside_steps_us"], "unattributed_us": stats["unattributed_us"],
        "profiled_total_us": stats["total_us"], "host_us_per_call": stats["host_us"],
        "steps": steps, "by_op": by_op(steps), "top": top_line(choice.problem, steps, row["correct"]),
        "wall_s": time.perf_counter() - started,
    })
    summed = row["gpu_us_per_call"]
    row["measured_vs_profiled"] = (row["t_us"] / summed) if row["t_us"] and summed else None
    del module, inputs
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


# ---------------------------------------------------------------------------------------------
# The report


def _us(value) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def to_markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [
        f"# Where the programs' time goes: {doc['suite']} ({doc['gpu_name']}, {doc['backend']}, {doc['date']})",
        "",
        f"The best program of each problem in {doc['eval_dir']} (the fastest correct attempt, else the first that "
        f"compiled), {doc['warmup']} warm-up calls, then {doc['calls']} calls profiled with each step eager "
        f"({'GPU kernel' if doc['time_source'] == 'cuda' else 'CPU profiler range'} times per call, no L2 flush). "
        "`summed` is the steps' time plus any between them; `t_us` is the attempt's measured time (the harness's: "
        "L2 flushed, CUDA graph where the runtime chose one).",
        "",
        f"{s['profiled']} of {s['problems']} problems profiled; {s['failed']} failed, {s['no_program']} without a "
        f"program, {s['skipped']} skipped (past the budget); {doc['wall_s']:.0f} s.",
        "",
        "## Top steps, per problem",
        "",
    ]
    lines += [f"- {r['top']}" if r.get("top") else f"- {r['problem']}: {r.get('status')}: {r.get('error') or ''}"
              for r in doc["rows"]]
    for r in doc["rows"]:
        lines += ["", f"## {r['problem']}", ""]
        if r.get("status") != "profiled":
            lines.append(f"{r.get('status')}" + (f": {r['error']}" if r.get("error") else ""))
            continue
        lines.append(
            f"Attempt {r['attempt']} ({r['chosen']}; {r['precision'] or '-'}), {r['kernels']} kernels and "
            f"{r['torch_steps']} torch steps: summed **{_us(r['gpu_us_per_call'])} us** per call against t_us "
            f"**{_us(r['t_us'])}** ({r['timing_source'] or '-'}); between steps {_us(r['outside_steps_us'])} us, "
            f"unattributed {_us(r['unattributed_us'])} us, host {_us(r['host_us_per_call'])} us per call "
            f"(profiled); attributed by {r['attribution']}. {r.get('runtime_options', '')}")
        lines.append("")
        lines.append("By op: " + "; ".join(f"{o['kind']} {o['op']} x{o['steps']} {_us(o['us_per_call'])} us"
                                           for o in r["by_op"][:6]))
        lines += ["", "| # | step | kind | op | us / call | % | launches | library kernels (top 2) |",
                  "| ---: | --- | --- | --- | ---: | ---: | ---: | --- |"]
        steps = r["steps"]
        shown = steps if len(steps) <= MD_MAX_STEPS else \
            sorted(sorted(steps, key=lambda x: -x["us_per_call"])[:MD_MAX_STEPS], key=lambda x: x["position"])
        for st in shown:
            kernels = "; ".join(f"`{k['name']}` {_us(k['us_per_call'])}" for k in st["top_kernels"]) \
                if st["kind"] == "torch" else (f"`{st['top_kernels'][0]['name']}`" if st["top_kernels"] else "-")
            lines.append(f"| {st['position']} | {st['name']} | {st['kind']} | {st['op']} | {_us(st['us_per_call'])} | "
                         f"{100 * (st['share'] or 0):.1f} | {st['launches_per_call']:g} | {kernels} |")
        if len(shown) < len(steps):
            rest = [x for x in steps if x not in shown]
            lines.append(f"| | {len(rest)} more steps | | | {_us(sum(x['us_per_call'] for x in rest))} | | | |")
    return "\n".join(lines) + "\n"


def summarize(rows: list[dict], total: int) -> dict:
    count = Counter(r.get("status") for r in rows)
    return {"problems": total, "profiled": count["profiled"], "failed": count["failed"],
            "no_program": count["no program"], "skipped": count["skipped"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("eval_dir", help="a folder written by `python3 -m mucutlass eval` (runs/, results.sqlite)")
    parser.add_argument("--problems", help="comma-separated problem names (default: every problem of the evaluation)")
    parser.add_argument("--suite", help="the suite the problems are from (e.g. models); default: each run's path")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--backend", choices=("cutlass", "interpreter"), default="cutlass")
    parser.add_argument("--budget-s", type=float, default=None, help="start no problem past this many seconds")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5, help="calls profiled per problem")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    eval_dir = Path(args.eval_dir)
    if not (eval_dir / "runs").is_dir():
        print(f"error: {eval_dir} holds no runs/ folder: give a folder written by `python3 -m mucutlass eval`",
              file=sys.stderr)
        return 2
    import torch

    cuda = torch.cuda.is_available()
    if args.backend == "cutlass" and not cuda:
        print("error: --backend cutlass needs a CUDA GPU and there is none here: use --backend interpreter",
              file=sys.stderr)
        return 2
    from evals.environment import collect_environment

    runs = problem_runs(eval_dir)
    names = [n.strip() for n in args.problems.split(",") if n.strip()] if args.problems else sorted(runs)
    gpu_name = torch.cuda.get_device_name() if cuda else "cpu"
    env = collect_environment(args.backend)
    doc = {"date": dt.date.today().isoformat(), "gpu": gpu_slug(gpu_name if cuda else None), "gpu_name": gpu_name,
           "suite": args.suite or eval_dir.name, "eval_dir": str(eval_dir), "backend": args.backend,
           "time_source": "cuda" if cuda else "cpu", "warmup": args.warmup, "calls": args.calls,
           "versions": env["versions"], "environment": env, "rows": [], "wall_s": 0.0}
    stem = Path(args.out) / f"{doc['date']}-{doc['gpu']}-profile-{doc['suite']}"

    def write(final: bool) -> None:
        doc["wall_s"] = time.perf_counter() - started
        doc["summary"] = summarize(doc["rows"], len(names))
        if final:
            write_result(stem, doc, to_markdown(doc))
        else:
            with contextlib.redirect_stdout(io.StringIO()):  # the table is printed once, at the end
                write_result(stem, doc, to_markdown(doc))

    warm_profiler(cuda)
    for name in names:
        if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
            doc["rows"].append({"problem": name, "status": "skipped",
                                "error": f"past the budget of {args.budget_s:g} s"})
            continue
        choice = None
        try:
            choice = choose_attempt(name, runs[name]) if name in runs else None
            if choice is None:
                why = "no run of it in the evaluation" if name not in runs else "no attempt compiled"
                doc["rows"].append({"problem": name, "status": "no program", "error": why})
            else:
                doc["rows"].append(profile_problem(choice, args.suite, args.backend, args.warmup, args.calls))
        except Exception as exc:  # noqa: BLE001 - one problem's failure leaves the others to profile
            line = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            doc["rows"].append({"problem": name, "status": "failed", "error": f"{type(exc).__name__}: {line}",
                                **({"attempt": choice.attempt.get("index"), "chosen": choice.why} if choice else {})})
        row = doc["rows"][-1]
        print(f"profile: {name}: {row.get('status')} {row.get('top') or row.get('error') or ''} "
              f"+{time.perf_counter() - started:.0f} s", flush=True)
        write(final=False)
    write(final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
