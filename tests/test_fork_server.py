"""Candidate processes forked from the judge's fork server (evals.judge.zygote): each is a fresh process that no
earlier candidate's state reaches, contained as a new Python's is (undumpable, the sandbox, the memory limit), and
a server that is gone or stopped is replaced or stepped around, never waited on."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time

import pytest

from evals.judge import wire
from evals.judge.sandbox import PROJECT_ROOT, CandidateProcess, sandbox_available
from evals.judge.zygote import Zygote

# Module-level code of a candidate runs when it is loaded: this one reports what it finds of an earlier candidate's
# marks and of its own containment, leaves marks of its own everywhere it can, and prints its report.
PROBE = textwrap.dedent("""
    import ctypes, json, os, random, sys, tempfile
    import numpy, torch
    import evals.judge.candidate as runner
    libc = ctypes.CDLL(None)
    found = {"torch": hasattr(torch, "EARLIER_CANDIDATE"), "runner": hasattr(runner, "EARLIER_CANDIDATE"),
             "env": "EARLIER_CANDIDATE" in os.environ, "modules": "earlier_candidate_module" in sys.modules,
             "default_dtype": str(torch.get_default_dtype())}
    out = {"found": found, "pid": os.getpid(), "dumpable": libc.prctl(3, 0, 0, 0, 0), "cwd": os.getcwd(),
           "tmp": tempfile.gettempdir(), "random": random.random(), "numpy": float(numpy.random.random()),
           "torch_random": float(torch.rand(1)),
           "cap_eff": int(next(l for l in open("/proc/self/status") if l.startswith("CapEff")).split()[1], 16), "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
    for name, path in (("outside", OUTSIDE), ("own", os.path.join(os.getcwd(), "own.txt"))):
        try:
            open(path, "w").write("x")
            out[name] = "written"
        except OSError as e:
            out[name] = e.strerror
    torch.EARLIER_CANDIDATE = runner.EARLIER_CANDIDATE = 1
    os.environ["EARLIER_CANDIDATE"] = "1"
    sys.modules["earlier_candidate_module"] = runner
    torch.set_default_dtype(torch.float64)
    print("REPORT" + json.dumps(out), flush=True)  # its stdout is the log the judge keeps
    raise RuntimeError("reported")
""")


def _probe(proc: CandidateProcess, outside: str) -> dict:
    source = f"OUTSIDE = {outside!r}\n" + PROBE
    reply = proc.request("load", {"device": "cpu", "candidate": {"source": source}, "init_args": []}, timeout_s=120)
    assert not reply["ok"] and "reported" in reply["error"], reply
    fd = proc.log.fileno()
    log = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
    return json.loads(log.split("REPORT", 1)[1].splitlines()[0])


@pytest.fixture(scope="module")
def zygote():
    z = Zygote.start()
    assert z.wait_ready(), "the fork server did not become ready"
    yield z
    z.close()


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandbox", "no-sandbox"])
def test_a_forked_candidate_process_is_fresh_and_contained(zygote, sandbox, tmp_path):
    if sandbox and not sandbox_available():
        pytest.skip("no namespaces here (the judge falls back to snapshots)")
    outside = str(tmp_path / "outside.txt")
    reports = []
    for _ in range(2):
        proc = CandidateProcess.start(zygote=zygote, sandbox=sandbox)
        try:
            assert proc.forked and proc.wait_armed(10.0)
            reports.append(_probe(proc, outside))
        finally:
            proc.finish()
        if not sandbox:
            (tmp_path / "outside.txt").unlink(missing_ok=True)
    first, second = reports
    # nothing the first candidate changed in its process reaches the second
    assert not any(v for k, v in second["found"].items() if k != "default_dtype"), second["found"]
    assert second["found"]["default_dtype"] == "torch.float32"
    assert zygote.alive() and zygote.is_ready()
    for r in reports:
        assert r["dumpable"] == 0  # undumpable from its first instruction (the server's flag is inherited)
        assert r["tmp"] == r["cwd"] and r["own"] == "written"  # its own folder, its own temporary files
        # no capability that reads or writes another process's memory, even as root (a fork keeps its effective
        # set where an exec would have cut it to the bounding set)
        for cap in (19, 21, 38, 39):  # CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF
            assert not r["cap_eff"] >> cap & 1, (cap, hex(r["cap_eff"]))
    assert first["cwd"] != second["cwd"]
    # a generator seeded once in the server is seeded afresh in each process (torch's is the fixed default, as in
    # a new Python, and the judge seeds what matters)
    assert first["random"] != second["random"] and first["numpy"] != second["numpy"]
    if sandbox:
        for r in reports:
            assert r["pid"] == 1 and r["procs"] == [1]  # the server and the judge are not visible
            assert r["outside"] == "Read-only file system"
        assert not os.path.exists(outside) and not (PROJECT_ROOT / "own.txt").exists()


def test_the_fork_server_holds_no_shared_writable_memory():
    """A writable shared mapping in the server would be shared by every process forked from it: the server refuses
    to fork while one exists (checked before every fork; the other tests here fork, so it has none)."""
    import mmap

    from evals.judge.zygote import shared_writable_mappings

    before = set(shared_writable_mappings())
    shared = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
    try:
        assert len(set(shared_writable_mappings()) - before) == 1
    finally:
        shared.close()
    assert set(shared_writable_mappings()) == before


def test_the_memory_limit_holds_for_a_forked_candidate(zygote):
    proc = CandidateProcess.start(zygote=zygote, rss_limit_bytes=600 << 20)
    hog = "hog = bytearray(900 << 20)\nfor i in range(0, len(hog), 4096):\n    hog[i] = 1\nimport time\ntime.sleep(30)\n"
    try:
        assert proc.forked
        with pytest.raises(wire.ChannelError) as err:
            proc.request("load", {"device": "cpu", "candidate": {"source": hog}, "init_args": []}, timeout_s=60)
        assert err.value.rule == "crash"
        state = proc.finish()
    finally:
        proc.finish()
    assert state.get("memory_limit_hit") is True and state.get("reason") == "memory_limit", state


def test_a_stopped_fork_server_is_stepped_around_and_a_dead_one_replaced():
    from evals.judge.process import Judge

    judge = Judge()
    try:
        first = judge.fork_server()
        assert first is not None and first.wait_ready()
        spare = judge.take_spare()
        assert spare.forked
        spare.finish()
        os.kill(first.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while first.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        fallback = CandidateProcess.start(zygote=first)  # a stopped server is not asked: a new Python instead
        assert not fallback.forked and time.monotonic() - t0 < 5
        fallback.finish()
        second = judge.fork_server()  # the stopped one is ended and replaced
        assert second is not first and first.proc.poll() is not None
        assert second.wait_ready()
        second.proc.kill()
        second.proc.wait(timeout=10)
        third = judge.fork_server()
        assert third is not second and third.wait_ready()
    finally:
        judge.close()
    assert judge.zygote is None


def test_the_fork_server_can_be_turned_off(monkeypatch):
    from evals.judge.process import Judge
    from evals.judge.settings import HarnessSettings

    monkeypatch.setenv("MUCUTLASS_FORK_SERVER", "0")
    assert HarnessSettings().fork_server is False
    judge = Judge()
    judge.settings = HarnessSettings()
    try:
        assert judge.fork_server() is None
    finally:
        judge.close()


@pytest.mark.gpu
def test_a_forked_candidate_starts_cuda_that_the_server_never_touched(zygote):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    proc = CandidateProcess.start(zygote=zygote)
    try:
        assert proc.forked, zygote.error  # why the server did not fork, in the failure's line
        info = proc.request("ping", {}, timeout_s=120)["result"]
        assert info["cuda"] is True and info["gpu_name"]
    finally:
        proc.finish()
    # the server checks before every fork that it holds no CUDA context and no GPU device open: it forks again
    again = CandidateProcess.start(zygote=zygote)
    try:
        assert again.forked and again.request("ping", {}, timeout_s=120)["result"]["cuda"] is True
    finally:
        again.finish()


def test_unset_it_is_on_without_a_gpu_and_off_with_one(monkeypatch):
    from evals.judge.process import Judge
    from evals.judge.settings import HarnessSettings

    monkeypatch.delenv("MUCUTLASS_FORK_SERVER", raising=False)
    assert HarnessSettings().fork_server is None
    monkeypatch.setenv("MUCUTLASS_FORK_SERVER", "1")
    assert HarnessSettings().fork_server is True
    monkeypatch.delenv("MUCUTLASS_FORK_SERVER")
    judge = Judge()
    judge.settings = HarnessSettings()
    try:
        judge.cuda = True  # a GPU host: not until measured there
        assert judge.fork_server() is None
    finally:
        judge.close()


def test_the_first_device_probe_names_its_caller_and_the_originals_come_back():
    """A fork server that finds the driver initialised says what asked for a device count first (on a GPU host
    the server refused every fork; this says which import did it)."""
    import torch

    from evals.judge.zygote import cuda_touched, first_device_probe

    before = torch.cuda.is_available
    found: list[str] = []
    with first_device_probe(found):
        assert torch.cuda.is_available is not before
        torch.cuda.is_available()
        torch.cuda.device_count()
    assert torch.cuda.is_available is before
    assert len(found) == 1 and found[0].startswith("torch.cuda.is_available called from test_fork_server.py:")
    if not torch.cuda.is_available():
        assert cuda_touched() == ""  # no GPU: nothing of CUDA is held
