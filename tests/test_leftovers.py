"""A run killed with SIGKILL leaves nothing in the system temp folder (no worker logs, no torch
caches), and a worker's last words still reach the crash reason while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "evals" / "suites" / "smoke" / "01_gemm_tiny.py"


def test_a_sigkilled_run_leaves_nothing_in_the_temp_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), "MUCUTLASS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "mucutlass", "optimize", str(PROBLEM), "--backend", "interpreter",
                             "--policy", "fixed", "--max-attempts", "40", "--json", "--out", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # kill once the worker has validated an attempt
            if '"event": "attempt"' in line or time.monotonic() > deadline:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    time.sleep(2)  # the worker sees its pipe close and exits
    assert sorted(p.name for p in tmp.rglob("*")) == []


def test_a_dying_workers_last_words_reach_the_crash_reason(tmp_path, monkeypatch):
    import tempfile

    import pytest

    from evals.judge.client import HarnessSettings, WorkerFailure, WorkerProcess

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'first line' >&2\necho 'CUDA out of memory: last words' >&2\nexit 3\n")
    fake_python.chmod(0o755)
    worker = WorkerProcess(HarnessSettings(device="cpu", python=str(fake_python)))
    try:
        with pytest.raises(WorkerFailure, match="exit code 3.*last output: first line \\| CUDA out of memory: last words"):
            worker.request("ping", {}, timeout_s=30)
        assert [p.name for p in tmp_path.iterdir()] == ["python"]  # the log has no name in the temp folder
    finally:
        worker.close()
