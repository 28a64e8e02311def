"""`mucutlass optimize` and `resume` end to end on this machine: the real parser, checks, SOL model
and harness (interpreter backend, real execution on the CPU), with a model tier served by a mock
OpenAI server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mucutlass.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"

UNFUSED = """program linear_relu
input x: f32[16, 32]
param w: f32[64, 32] = "fc.weight"
param b: f32[64] = "fc.bias"
kernel fc = gemm(x, w^T) {
  math = tf32
  store h: f32 = acc + b[col]
}
torch y = relu(h)
output y
"""
BROKEN = UNFUSED.replace('param w: f32[64, 32] = "fc.weight"\n', "")
FUSED = """program linear_relu
input x: f32[16, 32]
param w: f32[64, 32] = "fc.weight"
param b: f32[64] = "fc.bias"
kernel fc = gemm(x, w^T) {
  math = tf32
  store y: f32 = relu(acc + b[col])
}
output y
"""


def test_optimize_end_to_end_on_the_interpreter(tmp_path, capsys, monkeypatch):
    """A tier from a tiers file -> ChatOpenAI -> a mock OpenAI server; the rest is real."""
    from mock_servers import MockOpenAI

    out = tmp_path / "run"
    monkeypatch.setenv("MOCK_OPENAI_KEY", "sk-local")
    replies = [f"```mcu\n{p}```" for p in (UNFUSED, BROKEN, FUSED)]
    with MockOpenAI(replies, usage=(2000, 400)) as server:
        tiers = tmp_path / "tiers.toml"
        tiers.write_text(f'[tiers.local]\nmodel = "mock-model"\nbase_url = "{server.url}/v1"\n'
                         'api_key_env = "MOCK_OPENAI_KEY"\nprice_in_per_mtok = 1.0\nprice_out_per_mtok = 5.0\n'
                         'max_retries = 0\ntimeout_s = 30\n')
        code = main(["optimize", str(PROBLEM), "--tier", "local", "--tiers-file", str(tiers), "--policy", "fixed",
                     "--max-attempts", "3", "--backend", "auto", "--out", str(out), "--json"])
    assert code == 0
    assert len(server.requests) == 3 and "'w' is not defined" in server.requests[2]["body"]["messages"][1]["content"]
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    start = events[0]
    assert start["event"] == "start" and start["backend"] == "interpreter" and start["backend_reason"]
    attempts = [e for e in events if e["event"] == "attempt"]
    assert [e["correct"] for e in attempts] == [True, False, True]
    assert "'w' is not defined" in attempts[1]["failure_reason"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "interpreter" and summary["attempts"] == 3
    assert summary["t_sol_us"] > 0 and summary["best_index"] in (1, 3)
    assert (out / "best.mcu").read_text() in (UNFUSED, FUSED)
    rows = json.loads((out / "attempts.json").read_text())
    assert rows[0]["timing_source"] == "estimate" and rows[0]["max_abs_error"] is not None
    # the fused program moves fewer bytes: the SOL model's estimate says it is faster
    assert rows[2]["t_us"] < rows[0]["t_us"] and summary["best_index"] == 3
    first = rows[1]["diagnostics"][0]  # a Diagnostic's JSON form: code and location, not rendered text
    assert first["code"] == "undefined-name" and (first["span"]["line"], first["span"]["column"]) == (4, 21)
    assert summary["tokens_in"] == 6000 and summary["tokens_out"] == 1200
    assert abs(summary["cost_usd"] - (6000 * 1.0 + 1200 * 5.0) / 1e6) < 1e-12
    assert 0 < summary["graph_overhead_s"] < summary["wall_s"]
    # resuming a finished run keeps its result; the tier is looked up in the user's configuration, which names
    # the tiers file again (the run folder records only the tier's name)
    capsys.readouterr()
    assert main(["resume", str(out), "--json"]) == 1
    err = capsys.readouterr().err
    assert "tier 'local'" in err and "--tiers-file" in err
    assert main(["resume", str(out), "--json", "--tiers-file", str(tiers)]) == 0
    assert json.loads((out / "summary.json").read_text())["best_index"] == 3


def test_optimize_usage_errors(tmp_path, capsys):
    assert main(["optimize", str(tmp_path / "missing.py")]) == 1
    assert "no such problem file" in capsys.readouterr().err
    assert main(["optimize", str(PROBLEM), "--tier", "nonexistent", "--out", str(tmp_path / "r")]) == 1
    assert "unknown tier 'nonexistent'" in capsys.readouterr().err
    assert main(["optimize", str(PROBLEM), "--tier", f"playback:{tmp_path}/none"]) == 1
    assert "playback:" in capsys.readouterr().err
    assert main(["resume", str(tmp_path)]) == 1
    assert "not a run directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["optimize", str(PROBLEM), "--policy", "greedy"])
    assert exc.value.code == 2


def test_cli_module_imports_nothing_heavy():
    import subprocess
    import sys

    code = "import sys, graph.cli; print(any(m in sys.modules for m in ('torch', 'langgraph', 'langchain_core')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


def test_auto_backend_says_what_it_chose_and_why(monkeypatch):
    import dsl_compiler.backend as context

    assert context.resolve_backend("interpreter") == ("interpreter", "chosen with --backend")
    monkeypatch.setattr(context, "gpu_available", lambda: (False, "no CUDA GPU visible to PyTorch"))
    assert context.resolve_backend("auto") == ("interpreter", "no CUDA GPU visible to PyTorch: timings are model estimates")
    monkeypatch.setattr(context, "gpu_available", lambda: (True, "GPU NVIDIA H200 and nvcc found"))
    assert context.resolve_backend("auto") == ("cutlass", "GPU NVIDIA H200 and nvcc found")


def test_optimize_without_a_problem_picks_the_builtin_default(monkeypatch):
    from graph import cli

    monkeypatch.setattr("dsl_compiler.backend.gpu_available", lambda: (False, "no CUDA GPU visible to PyTorch"))
    path, why = cli.default_problem()
    assert path.is_file() and path.parent.name == "smoke"
    assert "no CUDA GPU" in why and "estimates" in why
    monkeypatch.setattr("dsl_compiler.backend.gpu_available", lambda: (True, "GPU NVIDIA H200 and nvcc found"))
    path, why = cli.default_problem()
    assert path.is_file() and path.parent.name == "builtin" and "H200" in why


def run_on_a_terminal(argv: list[str], timeout_s: float = 300) -> tuple[int, str]:
    """``mucutlass ARGV`` with its stdout and stderr on a pseudo-terminal: (exit code, what it showed, without the
    terminal's control sequences)."""
    import os
    import pty
    import re
    import select
    import subprocess
    import sys
    import time

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm", "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "mucutlass", *argv], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env=env)
    os.close(slave)
    shown, deadline = b"", time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1.0)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the command closed the terminal: it has ended
                    break
                if not data:
                    break
                shown += data
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.wait(), re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace"))


def test_a_terminal_sees_what_each_wait_is_for_and_json_stays_clean(tmp_path):
    code, shown = run_on_a_terminal(["optimize", str(PROBLEM), "--max-attempts", "1", "--out", str(tmp_path / "run")])
    assert code == 0, shown[-2000:]
    for stage in ("checking 02_linear_relu_tiny.py in a child process", "validating attempt 1 on the interpreter...",
                  "checking attempt 1...", "judging attempt 1 against the bound..."):
        assert stage in shown, shown[-3000:]
    # --json: the stages stay off stdout, whose every line is an event
    done = subprocess.run([sys.executable, "-m", "mucutlass", "optimize", str(PROBLEM), "--max-attempts", "1",
                           "--out", str(tmp_path / "json"), "--json"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    assert events[0] == "start" and events[-1] == "done" and "stage" not in events


def test_the_default_problems_backend_search_is_shown_while_pytorch_imports(tmp_path):
    code, shown = run_on_a_terminal(["optimize", "--max-attempts", "1", "--out", str(tmp_path / "run")])
    assert code == 0, shown[-2000:]
    looking = shown.find("looking for a GPU and nvcc (importing PyTorch)")
    assert 0 <= looking < shown.find("no problem named"), shown[-3000:]


def test_a_runs_judge_starts_in_the_background_and_answers_later():
    from graph.context import Services

    services = Services()
    try:
        services.start_harness()  # returns while the judge imports torch: nothing is asked of it yet
        worker = services.harness()._worker
        assert worker is not None and worker.alive and worker.info is None
        assert services.harness().worker_info().get("pid") == worker.proc.pid  # the same process, now answering
        assert services.harness()._worker is worker
    finally:
        services.close()
    assert worker.proc.poll() is not None


def test_a_judge_started_ahead_and_never_asked_is_ended_at_once():
    from evals.judge.client import WorkerProcess
    from evals.judge.settings import HarnessSettings

    worker = WorkerProcess(HarnessSettings(device="cpu"))
    worker.close()  # killed, not waited on for its stdin's end (it reads stdin only once torch is imported)
    assert worker.proc.returncode == -9


def test_eval_and_bench_show_what_they_wait_for(tmp_path):
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    (level / "1_linear_relu.py").write_text(PROBLEM.read_text())
    code, shown = run_on_a_terminal(["eval", "--kernelbench", str(tmp_path / "kb"), "--level", "1", "--policies",
                                     "fixed", "--max-attempts", "1", "--out", str(tmp_path / "ev")])
    assert code == 0, shown[-2000:]
    assert "checking the problems in a child process" in shown and "L1/1 [offline, dsl+sol, fixed]: validating attempt " \
        "1 on the interpreter" in shown, shown[-3000:]
    code, shown = run_on_a_terminal(["bench", str(PROBLEM)])
    assert code == 0 and "[1/1] 02_linear_relu_tiny: counting its speed-of-light bound..." in shown, shown[-2000:]
