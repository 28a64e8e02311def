"""Calls into problem code run under a time limit: a problem whose import or get_inputs() hangs ends
each command with one line and exit 1 instead of hanging it; inputs no kernel takes are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsl_compiler.limits import ChildCalls, ChildDied, TimeLimitExceeded, time_limit

ROOT = Path(__file__).resolve().parent.parent
TINY = (ROOT / "evals" / "suites" / "smoke" / "01_gemm_tiny.py").read_text()
INPUTS = "    return [torch.rand(M, K), torch.rand(K, N)]"
LIMIT_S = 5


def cli(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUCUTLASS_PROBLEM_TIME_LIMIT_S": str(LIMIT_S)}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mucutlass", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)
    return done, time.monotonic() - start


def test_a_sleeping_call_is_interrupted():
    start = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match="get_inputs\\(\\) did not return within 0.3 s"):
        with time_limit("get_inputs()", 0.3):
            time.sleep(30)
    assert time.monotonic() - start < 5


def test_code_that_swallows_the_first_interruption_is_interrupted_again():
    start = time.monotonic()
    with pytest.raises(TimeLimitExceeded):
        with time_limit("Model()", 0.3):
            try:
                time.sleep(30)
            except BaseException:
                pass
            time.sleep(30)
    assert time.monotonic() - start < 5


def test_an_inner_limit_never_extends_an_outer_one():
    with pytest.raises(TimeLimitExceeded, match="outer"):
        with time_limit("outer", 0.3):
            with time_limit("inner", 30):
                time.sleep(30)
    with time_limit("outer", 30):  # and the outer limit is back in force after an inner one
        with time_limit("inner", 0.5):
            pass
        with pytest.raises(TimeLimitExceeded):
            with time_limit("again", 0.2):
                time.sleep(5)


def _swallow_every_interruption():
    with time_limit("a call that swallows interruptions"):
        while True:
            try:
                time.sleep(1)
            except BaseException:
                pass


def _add(a, b):
    return a + b


def _raise(exc):
    raise exc


def _exit_hard():
    with time_limit("a call that exits"):
        os._exit(3)


def test_a_call_that_swallows_every_interruption_is_stopped_with_its_process():
    with ChildCalls(limit_s=0.5) as calls:
        start = time.monotonic()
        with pytest.raises(TimeLimitExceeded, match="a call that swallows interruptions did not return within 0.5 s"):
            calls.call(_swallow_every_interruption)
        assert time.monotonic() - start < 10
        assert calls.call(_add, 2, 3) == 5  # the next call gets a fresh child


def test_a_child_call_raises_its_own_error_and_a_dead_child_says_so():
    with ChildCalls(limit_s=5) as calls:
        with pytest.raises(ValueError, match="bad value"):
            calls.call(_raise, ValueError("bad value"))
        assert calls.call(_add, "a", "b") == "ab"  # the same child goes on after an error
        with pytest.raises(ChildDied, match="a call that exits: the process running it exited with code 3"):
            calls.call(_exit_hard)


@pytest.fixture(scope="module")
def hanging(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hang") / "level1"
    d.mkdir()
    files = {
        "get_inputs": TINY.replace(INPUTS, "    import time; time.sleep(600)\n" + INPUTS),
        "import": TINY.replace("M, N, K = 64, 48, 32", "import time; time.sleep(600)\nM, N, K = 64, 48, 32"),
        "float64": TINY.replace(INPUTS, "    return [torch.rand(M, K, dtype=torch.float64), torch.rand(K, N)]"),
        # no signal stops this: only killing its process does
        "swallows": TINY.replace(INPUTS, "    import time\n    while True:\n        try:\n            time.sleep(1)\n"
                                         "        except BaseException:\n            pass\n" + INPUTS),
    }
    out = {}
    for i, (name, text) in enumerate(files.items(), 1):
        assert text != TINY
        out[name] = d / f"{i}_{name}.py"
        out[name].write_text(text)
    return out


COMMANDS = {
    "interpret": lambda p, tmp: ("interpret", str(ROOT / "examples" / "transposed_gemm.mcu"), "--problem", str(p)),
    "sol": lambda p, tmp: ("sol", str(p)),
    "optimize": lambda p, tmp: ("optimize", str(p), "--backend", "interpreter", "--out", str(tmp / "run")),
    "bench": lambda p, tmp: ("bench", str(p)),
    "trace": lambda p, tmp: ("trace", str(p)),
    "eval": lambda p, tmp: ("eval", "--kernelbench", str(p.parent.parent), "--level", "1", "--ids",
                            p.stem.split("_")[0], "--backend", "interpreter", "--policies", "fixed",
                            "--max-attempts", "1", "--out", str(tmp / "ev"), "--no-progress"),
}


@pytest.mark.parametrize("where", ["get_inputs", "import", "swallows"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_hanging_problem_ends_every_command_with_one_line(hanging, tmp_path, command, where):
    done, took_s = cli(*COMMANDS[command](hanging[where], tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert took_s < 60
    assert "Traceback" not in done.stderr
    assert f"did not return within {LIMIT_S} s" in done.stdout + done.stderr


def test_sol_refuses_float64_inputs(hanging):
    done, _ = cli("sol", str(hanging["float64"]))
    assert done.returncode == 1 and "float64" in done.stderr + done.stdout
    assert "t_SOL" not in done.stdout


def test_bench_says_why_a_row_could_not_run(hanging):
    done, _ = cli("bench", str(hanging["float64"]), "--json")
    assert done.returncode == 1
    assert "failed: L1/3:" in done.stderr and "float64" in done.stderr
