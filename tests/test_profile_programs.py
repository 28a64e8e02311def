"""benchmarks/profile_programs.py: a real (tiny) evaluation of the smoke suite on the interpreter is profiled step by
step on the CPU; the CUDA attribution (kernels to the steps that launched them) is checked on profiler events built
as torch.profiler gives them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from dsl_compiler.parser import parse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import profile_programs  # noqa: E402
from profile_programs import CALL_RANGE, STEP_RANGE, attribute, main, step_facts  # noqa: E402


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory) -> Path:
    """The smoke suite evaluated once (one attempt, interpreter), as `mucutlass eval` writes it."""
    out = tmp_path_factory.mktemp("eval") / "eval-smoke"
    done = subprocess.run([sys.executable, "-m", "mucutlass", "eval", "--suite", "smoke", "--max-attempts", "1",
                           "--backend", "interpreter", "--policies", "fixed", "--no-progress", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _run(eval_dir: Path, out: Path, *extra: str) -> dict:
    assert main([str(eval_dir), "--suite", "smoke", "--backend", "interpreter", "--out", str(out),
                 "--warmup", "1", "--calls", "2", *extra]) == 0
    [written] = list(out.glob("*-profile-smoke.json"))
    assert written.with_suffix(".md").exists()
    return json.loads(written.read_text())


def _best_program(eval_dir: Path, problem: str):
    [attempts] = list((eval_dir / "runs").glob(f"*{problem}/**/attempts.json"))
    rows = json.loads(attempts.read_text())
    best = min((a for a in rows if a["correct"]), key=lambda a: a["t_us"])
    return parse(best["program_text"])[0], best


def test_every_problem_profiled_with_its_own_steps(evaluation, tmp_path):
    doc = _run(evaluation, tmp_path / "out")
    rows = {r["problem"]: r for r in doc["rows"]}
    assert len(rows) == 5 and doc["summary"]["profiled"] == 5
    assert doc["time_source"] == "cpu" and doc["gpu"] == "cpu"
    for name, row in rows.items():
        program, best = _best_program(evaluation, name)
        assert row["status"] == "profiled" and row["correct"] and row["attempt"] == best["index"]
        assert row["t_us"] == best["t_us"]
        expected = [step_facts(s) for s in program.steps]
        assert [(s["name"], s["kind"], s["op"]) for s in row["steps"]] == \
            [(e["name"], e["kind"], e["op"]) for e in expected]
        assert [s["position"] for s in row["steps"]] == list(range(len(program.steps)))
        assert (row["kernels"], row["torch_steps"]) == (len(program.kernels), len(program.torch_steps))
        assert all(s["us_per_call"] > 0 for s in row["steps"])
        summed = sum(s["us_per_call"] for s in row["steps"])
        assert summed <= row["profiled_total_us"] * (1 + 1e-9)
        assert row["gpu_us_per_call"] == pytest.approx(summed + row["outside_steps_us"])
        shares = sum(s["share"] for s in row["steps"])
        assert 0 < shares <= 1 + 1e-9
        top = max(row["steps"], key=lambda s: s["us_per_call"])
        assert row["top"].startswith(f"{name}: {top['name']} ({top['kind']} {top['op']})")
    conv = rows["03_conv2d_relu_tiny"]["steps"]
    assert [(s["name"], s["kind"], s["op"]) for s in conv] == [("x_cl", "torch", "channels_last"),
                                                               ("t_conv", "kernel", "conv2d")]
    assert conv[0]["top_kernels"], "a torch step names the operators it ran"
    md = Path(next((tmp_path / "out").glob("*.md"))).read_text()
    for name, row in rows.items():
        assert f"- {row['top']}" in md and f"## {name}" in md


def test_no_correct_attempt_and_no_program_reported(evaluation, tmp_path):
    copy = tmp_path / "eval"
    shutil.copytree(evaluation, copy, ignore=shutil.ignore_patterns("*.sqlite*", ".mucutlass-lock"))
    [wrong] = list((copy / "runs").glob("*04_mlp_tiny/**/attempts.json"))
    rows = json.loads(wrong.read_text())
    wrong.write_text(json.dumps([{**a, "correct": False} for a in rows]))
    [broken] = list((copy / "runs").glob("*01_gemm_tiny/**/attempts.json"))
    rows = json.loads(broken.read_text())
    broken.write_text(json.dumps([{**a, "compile_ok": False, "correct": False} for a in rows]))
    doc = _run(copy, tmp_path / "out", "--problems", "04_mlp_tiny,01_gemm_tiny,99_missing")
    by = {r["problem"]: r for r in doc["rows"]}
    assert by["04_mlp_tiny"]["status"] == "profiled" and not by["04_mlp_tiny"]["correct"]
    assert by["04_mlp_tiny"]["chosen"].startswith("no correct attempt")
    assert by["04_mlp_tiny"]["top"].startswith("04_mlp_tiny: (no correct attempt) ")
    assert by["01_gemm_tiny"] == {"problem": "01_gemm_tiny", "status": "no program", "error": "no attempt compiled"}
    assert by["99_missing"]["status"] == "no program"
    assert doc["summary"] == {"problems": 3, "profiled": 1, "failed": 0, "no_program": 2, "skipped": 0}


def test_past_the_budget_nothing_starts_but_the_files_are_written(evaluation, tmp_path):
    doc = _run(evaluation, tmp_path / "out", "--budget-s", "0")
    assert [r["status"] for r in doc["rows"]] == ["skipped"] * 5


def test_a_problem_that_fails_leaves_the_others(evaluation, tmp_path):
    copy = tmp_path / "eval"
    shutil.copytree(evaluation, copy, ignore=shutil.ignore_patterns("*.sqlite*", ".mucutlass-lock"))
    [attempts] = list((copy / "runs").glob("*02_linear_relu_tiny/**/attempts.json"))
    rows = json.loads(attempts.read_text())
    # a param bound from a key the problem's Model does not have
    attempts.write_text(json.dumps([{**a, "program_text": a["program_text"].replace('"fc.weight"', '"nope.weight"')}
                                    for a in rows]))
    doc = _run(copy, tmp_path / "out", "--problems", "02_linear_relu_tiny,04_mlp_tiny")
    by = {r["problem"]: r for r in doc["rows"]}
    assert by["02_linear_relu_tiny"]["status"] == "failed" and "nope.weight" in by["02_linear_relu_tiny"]["error"]
    assert by["04_mlp_tiny"]["status"] == "profiled"


def test_cutlass_without_a_gpu_is_one_clear_line(evaluation, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert main([str(evaluation), "--out", str(tmp_path)]) == 2
    assert "--backend interpreter" in capsys.readouterr().err
    assert main([str(tmp_path / "nothing"), "--backend", "interpreter", "--out", str(tmp_path)]) == 2


# ---------------------------------------------------------------------------------------------
# The CUDA attribution, on events shaped as torch.profiler's FunctionEvents

Kernel = namedtuple("Kernel", ["name", "device", "duration"])


def _event(name, start, end, device=DeviceType.CPU, id=0, parent=None, kernels=()):
    return SimpleNamespace(name=name, device_type=device, id=id, cpu_parent=parent, kernels=list(kernels),
                           time_range=SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start))


def _one_call(t0: float, linked: bool, launches: bool) -> list:
    """One call: step 0 a CUTLASS kernel launched from its library (no operator around it: only the launch
    call links it), step 1 a torch step whose operator launched a library kernel, a copy between the steps."""
    call = _event(CALL_RANGE, t0, t0 + 100)
    s0 = _event(f"{STEP_RANGE}0", t0 + 10, t0 + 40, parent=call)
    s1 = _event(f"{STEP_RANGE}1", t0 + 50, t0 + 90, parent=call)
    op = _event("aten::batch_norm", t0 + 55, t0 + 80, parent=s1,
                kernels=[Kernel("bn_kernel", 0, 12.0)] if linked else [])
    copy = _event("aten::copy_", t0 + 92, t0 + 95, parent=call,
                  kernels=[Kernel("Memcpy DtoD", 0, 2.0)] if linked else [])
    cid = int(t0) * 10
    events = [call, s0, s1, op, copy,
              _event("cutlass::device_kernel<X>", t0 + 30, t0 + 60, DeviceType.CUDA, id=cid + 1),
              _event("bn_kernel", t0 + 70, t0 + 82, DeviceType.CUDA, id=cid + 2),
              _event("Memcpy DtoD", t0 + 96, t0 + 98, DeviceType.CUDA, id=cid + 3),
              # the GPU side of a range is no work of its own
              _event(f"{STEP_RANGE}0", t0 + 30, t0 + 60, DeviceType.CUDA, id=cid + 4),
              SimpleNamespace(**{**vars(_event("someone's range", t0, t0 + 99, DeviceType.CUDA, id=cid + 5)),
                                 "is_user_annotation": True})]
    if launches:
        events += [_event("cudaLaunchKernelExC", t0 + 20, t0 + 22, id=cid + 1, parent=s0),
                   _event("cudaLaunchKernel", t0 + 60, t0 + 61, id=cid + 2, parent=op),
                   _event("cudaMemcpyAsync", t0 + 93, t0 + 94, id=cid + 3, parent=copy)]
    return events


def test_kernels_go_to_the_step_whose_range_launched_them():
    events = _one_call(0, linked=True, launches=True) + _one_call(1000, linked=True, launches=True)
    stats = attribute(events, calls=2, cuda=True)
    assert stats["method"] == "launch"
    assert stats["step_us"] == {0: 30.0, 1: 12.0}
    assert stats["launches"] == {0: 1.0, 1: 1.0}
    assert stats["names"][0] == [("cutlass::device_kernel<X>", 30.0)]
    assert stats["outside_steps_us"] == 2.0
    assert stats["unattributed_us"] == 0.0
    assert stats["total_us"] == 44.0


def test_without_launch_calls_the_operators_links_are_used_and_the_rest_is_said():
    stats = attribute(_one_call(0, linked=True, launches=False), calls=1, cuda=True)
    assert stats["method"] == "operator"
    # the CUTLASS kernel had no operator to link to: it is unattributed, not lost
    assert stats["step_us"] == {1: 12.0}
    assert stats["outside_steps_us"] == 2.0
    assert stats["unattributed_us"] == 30.0
    assert stats["total_us"] == 44.0


def test_rows_and_top_line_from_the_attribution():
    program, _ = parse("""program p
input x: f32[4, 8]
param w: f32[8, 8] = "w"
kernel mm = gemm(x, w^T) {
  store y: f32 = acc
}
torch z = sigmoid(y)
output z
""")
    stats = attribute(_one_call(0, linked=True, launches=True), calls=1, cuda=True)
    steps = profile_programs.step_rows(program, stats)
    assert [(s["name"], s["kind"], s["op"], s["us_per_call"]) for s in steps] == \
        [("mm", "kernel", "gemm", 30.0), ("z", "torch", "sigmoid", 12.0)]
    assert steps[0]["share"] == pytest.approx(30 / 44)
    assert profile_programs.top_line("p", steps) == "p: mm (kernel gemm) 30 us 68%; z (torch sigmoid) 12 us 27%"
