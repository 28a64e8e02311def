"""Evaluations that cannot start, folders two processes want, and damaged stores: recorded as such,
retried, refused with one line, and reflected in the exit code."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from evals.executors import LocalExecutor
from evals.locks import LOCK_FILE, FolderBusy, FolderLock
from evals.runner import EvalConfig, run_evaluation
from evals.store import ResultsStore

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "evals" / "suites" / "smoke"
NEEDS_KEY = "tests.data.eval.fake_run:needs_key"
FAKE = "tests.data.eval.fake_run:run"


def cli(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "mucutlass", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=ROOT)


def kernelbench(tmp_path: Path, *names: str) -> Path:
    """A KernelBench-shaped folder holding copies of smoke problems as level 1, ids 1.."""
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    for i, name in enumerate(names, 1):
        shutil.copy(SMOKE / name, level / f"{i}_{Path(name).stem}.py")
    return tmp_path / "kb"


def problems(tmp_path: Path, n: int = 3) -> dict[str, str]:
    paths = {}
    for i in range(n):
        p = tmp_path / "problems" / f"p{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("# problem file\n")
        paths[f"mini/p{i}"] = str(p)
    return paths


def config(paths, **kw) -> EvalConfig:
    return EvalConfig(**{**dict(source={"suite": "mini"}, problems=list(paths), tiers=["t"], policies=["fixed"],
                                max_attempts=3, backend="interpreter"), **kw})


def evaluate(paths, out, run_fn):
    return run_evaluation(config(paths), paths, out, executor=LocalExecutor(1), run_fn=run_fn, environment={},
                          show_progress=False, write_outputs=False)


# -- runs that could not start ---------------------------------------------------------------------

def test_a_run_that_could_not_start_is_stored_as_such_and_retried(tmp_path, monkeypatch):
    monkeypatch.delenv("FAKE_RUN_API_KEY", raising=False)
    paths, out = problems(tmp_path), tmp_path / "ev"
    first = evaluate(paths, out, NEEDS_KEY)
    assert first.ran == 3 and len(first.failed) == 3
    assert all(e.startswith("failed to start: setup failed:") for e in first.failed.values())
    store = ResultsStore.open_existing(out)
    assert Counter(store.run_status().values()) == {"failed_to_start": 3}
    assert store.finished_keys() == set()
    store.close()
    monkeypatch.setenv("FAKE_RUN_API_KEY", "k")
    second = evaluate(paths, out, NEEDS_KEY)
    assert (second.ran, second.skipped, second.failed) == (3, 0, {})  # retried, and now they run
    store = ResultsStore.open_existing(out)
    assert Counter(store.run_status().values()) == {"done": 3}
    assert all(len(s.attempts) == 3 for s in store.summaries())


def test_eval_without_the_tier_key_exits_non_zero_and_retries(tmp_path):
    kb = kernelbench(tmp_path, "01_gemm_tiny.py", "02_linear_relu_tiny.py")
    out = tmp_path / "ev"
    args = ("eval", "--kernelbench", str(kb), "--level", "1", "--tiers", "gpt-5-mini", "--policies", "fixed",
            "--max-attempts", "1", "--backend", "interpreter", "--out", str(out), "--no-progress")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    for _ in range(2):  # the second invocation tries both again: nothing counts as finished
        done = subprocess.run([sys.executable, "-m", "mucutlass", *args], capture_output=True, text=True,
                              timeout=180, env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert "2 run(s) now, 0 already finished" in done.stdout
        assert done.stdout.count("failed to start: setup failed:") == 2 and "OPENAI_API_KEY" in done.stdout
    store = ResultsStore.open_existing(out)
    assert set(store.run_status().values()) == {"failed_to_start"}


def test_problems_whose_setup_fails_are_runs_that_could_not_start(tmp_path):
    kb = kernelbench(tmp_path, "01_gemm_tiny.py")
    level = kb / "level1"
    good = (level / "1_01_gemm_tiny.py").read_text()
    inputs = "    return [torch.rand(M, K), torch.rand(K, N)]"
    broken = {
        "2_raises": good.replace(inputs, "    raise RuntimeError('no inputs')"),
        "3_none": good.replace(inputs, "    return None"),
        "4_float64": good.replace(inputs, "    return [torch.rand(M, K).double(), torch.rand(K, N).double()]"),
        "5_init_raises": good.replace("super().__init__()", "super().__init__()\n        raise ValueError('no')"),
        "6_sleeps": good.replace(inputs, "    import time; time.sleep(600)\n" + inputs),
    }
    for name, text in broken.items():
        assert text != good
        (level / f"{name}.py").write_text(text)
    out = tmp_path / "ev"
    started = time.monotonic()
    done = cli("eval", "--kernelbench", str(kb), "--level", "1", "--policies", "fixed", "--max-attempts", "1",
               "--backend", "interpreter", "--out", str(out), "--no-progress",
               env={"MUCUTLASS_PROBLEM_TIME_LIMIT_S": "5"})
    assert time.monotonic() - started < 150
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    store = ResultsStore.open_existing(out)
    status = {key[0]: s for key, s in store.run_status().items()}
    assert status.pop("L1/1") == "done"
    assert set(status.values()) == {"failed_to_start"} and len(status) == 5
    errors = {key[0]: e for key, e in store.failures().items()}
    assert "no inputs" in errors["L1/2"]
    assert "returned None" in errors["L1/3"]
    assert "float64" in errors["L1/4"]
    assert "ValueError" in errors["L1/5"]
    assert "did not return within 5 s" in errors["L1/6"]


def test_an_empty_run_json_fails_that_run_loudly(tmp_path):
    kb = kernelbench(tmp_path, "01_gemm_tiny.py")
    out = tmp_path / "ev"
    run_dir = out / "runs" / "L1_1" / "offline" / "fixed"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("")
    done = cli("eval", "--kernelbench", str(kb), "--level", "1", "--policies", "fixed", "--max-attempts", "1",
               "--backend", "interpreter", "--out", str(out), "--no-progress")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "failed: L1/1 [" in done.stdout and "run.json" in done.stdout


# -- one process per folder ------------------------------------------------------------------------

def test_a_second_eval_on_the_same_folder_names_the_holder_and_exits_2(tmp_path):
    out = tmp_path / "ev"
    with FolderLock(out):
        done = cli("eval", "--suite", "smoke", "--out", str(out), "--run-fn", FAKE, "--no-progress")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert f"pid {os.getpid()}" in line and "since" in line and "--wait" in line
    assert not (out / "results.sqlite").exists()


def test_in_process_a_held_folder_raises_folder_busy(tmp_path):
    paths = problems(tmp_path, 1)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from evals.locks import FolderLock; "
                               "l = FolderLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
                               str(tmp_path / "ev")], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusy, match=f"pid {holder.pid} "):
            evaluate(paths, tmp_path / "ev", FAKE)
        os.kill(holder.pid, signal.SIGKILL)  # a dead holder's lock is taken over at once
        holder.wait()
        assert evaluate(paths, tmp_path / "ev", FAKE).ran == 1
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_file_from_a_dead_pid_is_taken_over(tmp_path):
    out = tmp_path / "ev"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started_at": "yesterday"}))
    done = cli("eval", "--suite", "smoke", "--out", str(out), "--run-fn", FAKE, "--no-progress", "--max-attempts", "1")
    assert done.returncode == 0, done.stderr


def test_wait_blocks_until_the_holder_is_done(tmp_path):
    out = tmp_path / "ev"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from evals.locks import FolderLock\n"
                               "with FolderLock(sys.argv[1]):\n    print('held', flush=True); time.sleep(25)",
                               str(out)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        done = cli("eval", "--suite", "smoke", "--out", str(out), "--run-fn", FAKE, "--no-progress",
                   "--max-attempts", "1", "--wait")
        assert done.returncode == 0, done.stderr
        assert "waiting for" in done.stderr and holder.poll() is not None
    finally:
        holder.kill()
        holder.wait()


def test_optimize_holds_its_run_directory(tmp_path):
    run = tmp_path / "run"
    with FolderLock(run):
        done = cli("optimize", str(SMOKE / "01_gemm_tiny.py"), "--backend", "interpreter", "--max-attempts", "1",
                   "--out", str(run))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"pid {os.getpid()}" in done.stderr and "Traceback" not in done.stderr
    assert not (run / "run.json").exists()


# -- damaged stores --------------------------------------------------------------------------------

def damage_middle_page(db_path: Path) -> None:
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size, pages = db.execute("PRAGMA page_size").fetchone()[0], db.execute("PRAGMA page_count").fetchone()[0]
    db.close()
    data = bytearray(db_path.read_bytes())
    middle = pages // 2
    assert 1 <= middle < pages - 1 or pages >= 3
    data[middle * page_size:(middle + 1) * page_size] = b"\xa5" * page_size
    db_path.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["eval", "replay", "report"])
def test_a_results_store_with_a_damaged_page_is_one_line(tmp_path, command):
    paths = problems(tmp_path, 6)
    out = tmp_path / "ev"
    evaluate(paths, out, FAKE)
    damage_middle_page(out / "results.sqlite")
    args = {"eval": ("eval", "--suite", "smoke", "--out", str(out), "--run-fn", FAKE, "--no-progress"),
            "replay": ("replay", str(out)), "report": ("report", str(out))}[command]
    done = cli(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "damaged results store" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- an unreachable LangSmith endpoint -------------------------------------------------------------

def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.mark.parametrize("command", ["eval", "report"])
def test_an_unreachable_langsmith_endpoint_warns_and_keeps_exit_0(tmp_path, command):
    out = tmp_path / "ev"
    evaluate(problems(tmp_path, 2), out, FAKE)
    env = {"LANGSMITH_API_KEY": "lsv2-test-key", "LANGSMITH_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
           "LANGSMITH_TRACING": "false"}
    args = {"eval": ("eval", "--suite", "smoke", "--out", str(tmp_path / "ev2"), "--run-fn", FAKE, "--no-progress",
                     "--max-attempts", "1"),
            "report": ("report", str(out))}[command]
    done = cli(*args, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "warning: LangSmith upload" in done.stderr and "the report is written" in done.stderr
    written = (tmp_path / "ev2" if command == "eval" else out) / "report" / "report.md"
    assert written.is_file()
