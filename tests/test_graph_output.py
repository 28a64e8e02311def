"""What a newcomer reads from `mucutlass optimize`: unwrapped lines when piped, no contradictions, one error line for
a run that cannot start (and no folder left behind), and the promised model_new.py on the interpreter backend."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from graph.attempts import TIE_REL, judge
from run_vocabulary.records import AttemptRecord

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"
# every line the terminal printer writes for a run starts with one of these
LINE_STARTS = ("no problem named", "optimize ", "  t_SOL ", "  plan: ", "  attempt ", "  stop: ", "done: ",
               "  no model_new.py: ")


def _optimize_piped(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "mucutlass", "optimize", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_piped_output_is_not_wrapped_and_does_not_contradict_itself(tmp_path):
    out = tmp_path / "run"
    proc = _optimize_piped("--max-attempts", "6", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and all(line.startswith(LINE_STARTS) for line in lines), proc.stderr
    assert max(len(line) for line in lines) > 80  # long lines stay whole
    assert any(line.startswith("  attempt 1/6: ") and " tokens " in line for line in lines)
    assert "reference: none timed" in proc.stderr
    assert "reference is beaten" not in proc.stderr and "beating the reference" not in proc.stderr
    # "new best" only where the time really went down, never twice for one time
    rows = json.loads((out / "attempts.json").read_text())
    best = None
    for row, line in zip(rows, [line for line in lines if line.startswith("  attempt ")]):
        assert ("new best" in line) == bool(row["improved"])
        if row["improved"]:
            assert best is None or row["t_us"] < best * (1 - TIE_REL)
            best = row["t_us"]
    assert (out / "model_new.py").is_file()


def test_a_run_that_cannot_start_prints_its_error_once_and_leaves_no_folder(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x +\n")
    out = tmp_path / "run"
    proc = _optimize_piped(str(bad), "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.count("syntax error") == 1, proc.stderr
    # refused when the problem is checked, before the graph starts: the file and the line named
    assert proc.stderr.rstrip().splitlines()[-1] == f"error: {bad}:4: syntax error: invalid syntax"
    assert not out.exists()


def test_interpreter_backend_writes_a_model_new_that_matches_the_model(tmp_path, capsys):
    from mucutlass.cli import main

    out = tmp_path / "run"
    assert main(["optimize", str(PROBLEM), "--max-attempts", "2", "--backend", "interpreter", "--out", str(out),
                 "--json"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_new"] == "model_new.py" and "model_new_error" not in summary
    spec = importlib.util.spec_from_file_location("model_new_interp", out / "model_new.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(0)
    new = module.ModelNew(*module.get_init_inputs())
    x = module.get_inputs()[0]
    assert torch.allclose(new(x), model(x), atol=1e-2)
    new.fc.weight.data.zero_()  # it reads the module's own parameters, not a copy taken at export
    assert torch.allclose(new(x), torch.relu(new.fc.bias).expand(x.shape[0], -1))


def _attempt(index: int, t_us: float) -> AttemptRecord:
    return AttemptRecord(index=index, hypothesis="h", reached="profile", correct=True, t_us=t_us)


def test_an_equal_time_is_no_new_best():
    state = {"attempts": [], "best_t_us": 2.159121100572511, "sol": {"t_sol_us": 1.0}, "reference_us": {}}
    assert not judge(state, _attempt(2, 2.1591210956378473), 0.0, [])["attempts"][-1]["improved"]
    assert judge(state, _attempt(2, 2.0), 0.0, [])["attempts"][-1]["improved"]


def test_bench_table_is_not_cut_to_80_columns_when_piped(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="80")
    proc = subprocess.run([sys.executable, "-m", "mucutlass", "bench", str(PROBLEM)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    for word in ("02_linear_relu_tiny", "eager fp32", "eager TF32", "compile", "best/SOL", "memory"):
        assert word in proc.stdout


def test_the_setup_line_says_why_no_reference_was_timed():
    """The reason the harness gave (a reference that failed on the device) is printed, not a guess from the
    backend; without one, the interpreter backend is named only when it is the backend."""
    import io

    from rich.console import Console

    from graph.events import rich_printer

    def setup_line(**event) -> str:
        buf = io.StringIO()
        rich_printer(Console(file=buf, width=200, highlight=False))({"event": "setup", "t_sol_us": 1.0, "bound": "memory",
                                                                      "reference_us": {}, **event})
        return buf.getvalue()

    failed = setup_line(backend="cutlass", reference_reason="the reference failed: RuntimeError: Expected a 'cuda' device")
    assert "none timed (the reference failed: RuntimeError" in failed and "interpreter" not in failed
    assert "none timed (the interpreter backend times nothing)" in setup_line(backend="interpreter")
    assert "none timed (no GPU timing)" in setup_line(backend="cutlass")
    assert "eager_fp32 12.5 us" in setup_line(backend="cutlass", reference_us={"eager_fp32": 12.5})
