"""The candidate's containment below the judge (evals.judge.sandbox, evals.judge.supervisor), attacked directly: its
processes' memory and environment, a frozen supervisor, writes outside its folder, Python's start-up
folders. The whole-harness view of the same attacks is tests/adversarial (plants_next_attempt_env,
freezes_supervisor, writes_via_proc_root, plants_startup_hook)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from evals.judge.sandbox import PROJECT_ROOT, CandidateProcess, ProtectedTree, candidate_env, sandbox_available
from evals.judge.supervisor import _drop_ptrace, descendants, stopped


def _read_environ_without_ptrace(pid: int) -> str:
    """What a process without CAP_SYS_PTRACE (a candidate, even as root) gets opening /proc/<pid>/environ."""
    code = (f"try:\n open('/proc/{pid}/environ','rb').read(); print('read')\n"
            f"except OSError as e: print(type(e).__name__)")
    return subprocess.run([sys.executable, "-c", code], preexec_fn=_drop_ptrace, capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_candidate_processes_are_undumpable_once_armed():
    proc = CandidateProcess.start(sandbox=False)
    try:
        assert proc.wait_armed(60.0)
        tree = descendants(proc.proc.pid)
        assert tree, "the supervisor started no candidate process"
        for pid in [proc.proc.pid, *tree]:
            assert _read_environ_without_ptrace(pid) == "PermissionError", pid
        # the same reader gets the environment of a dumpable process with the candidate's capabilities (a root
        # process with more is shielded by them): the check above can fail
        plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], preexec_fn=_drop_ptrace)
        try:
            time.sleep(0.2)
            assert _read_environ_without_ptrace(plain.pid) == "read"
        finally:
            plain.kill()
            plain.wait()
    finally:
        proc.finish()


def test_a_stopped_supervisor_is_seen_and_its_tree_killed_by_the_judge():
    proc = CandidateProcess.start(sandbox=False)
    try:
        assert proc.wait_armed(60.0)
        tree = list(descendants(proc.proc.pid))
        os.kill(proc.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not stopped(proc.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.supervisor_stopped()
        assert proc.supervisor_report(timeout_s=30).get("supervisor_stopped")  # at once, not after the deadline
    finally:
        t0 = time.monotonic()
        proc.finish(timeout_s=30)
    assert time.monotonic() - t0 < 5, "finish waited for a supervisor that cannot answer"
    assert not [pid for pid in tree if os.path.exists(f"/proc/{pid}") and not _zombie(pid)]


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.skipif(not sandbox_available(), reason="no namespaces here (the judge falls back to snapshots)")
def test_the_sandbox_refuses_writes_outside_the_candidates_folder_and_hides_other_processes(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    outside = tmp_path / "outside.txt"
    probe = f"""
import json, os
out = {{"pid": os.getpid(), "procs": sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}}
for name, path in (("outside", {str(outside)!r}), ("project", {str(PROJECT_ROOT / '.sandbox-probe')!r}),
                   ("own", {str(workdir / 'own.txt')!r})):
    try:
        open(path, "w").write("x")
        out[name] = "written"
    except OSError as e:
        out[name] = e.strerror
try:
    os.kill(os.getppid() or 1, 0)
    out["parent"] = os.getppid()
except OSError as e:
    out["parent"] = e.strerror
print(json.dumps(out), flush=True)
"""
    cmd = [sys.executable, "-P", "-m", "evals.judge.supervisor", "--workdir", str(workdir), "--sandbox", "--",
           sys.executable, "-c", probe]
    keep_r, keep_w = os.pipe()  # the supervisor's stdin stays open while the probe runs (EOF ends the tree)
    try:
        p = subprocess.Popen(cmd, cwd=str(workdir), env=candidate_env(), stdin=keep_r, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        os.close(keep_r)
        out, err = p.communicate(timeout=120)
    finally:
        os.close(keep_w)
    seen = json.loads(err.strip().splitlines()[-1])  # the candidate's stdout is the supervisor's stderr
    exit_state = json.loads(out.strip().splitlines()[-1])
    assert exit_state["sandboxed"] is True
    assert seen["outside"] == "Read-only file system" and seen["project"] == "Read-only file system"
    assert seen["own"] == "written"
    assert seen["pid"] == 1 and seen["procs"] == [1]  # no process outside its namespace is visible
    assert seen["parent"] == 0  # its supervisor lives outside: getppid() is 0 there
    assert not outside.exists() and not (PROJECT_ROOT / ".sandbox-probe").exists()


def test_startup_folders_count_new_top_level_entries(tmp_path):
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    deep = site / "torch" / "deep.py"
    tree = ProtectedTree(roots=[], shallow=[site])
    before = tree.snapshot()
    hook = site / "zz_hook.pth"
    hook.write_text("import os\n")
    deep.write_text("x = 1\n")  # below the top level: not watched here (the sandbox makes it read-only)
    written = tree.written(before)
    assert str(hook) in written and str(deep) not in written
    tree.undo(before, written)
    assert not hook.exists()


def test_candidates_get_their_own_compile_caches_and_no_user_site(tmp_path, monkeypatch):
    env = candidate_env({"PATH": os.environ.get("PATH", "")}, workdir=str(tmp_path))
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH",
                "XDG_CACHE_HOME", "TMPDIR"):
        assert env[var].startswith(str(tmp_path)), var
    assert env["MUCUTLASS_CACHE_DIR"] and not env["MUCUTLASS_CACHE_DIR"].startswith(str(tmp_path))
    from evals.judge.sandbox import user_site_needed

    assert user_site_needed() or env.get("PYTHONNOUSERSITE") == "1"
    # either way: the user's site folder is cut off unless the harness's own dependencies live there
    monkeypatch.setattr("evals.judge.sandbox.user_site_needed", lambda: False)
    assert candidate_env({}, workdir=str(tmp_path)).get("PYTHONNOUSERSITE") == "1"
    monkeypatch.setattr("evals.judge.sandbox.user_site_needed", lambda: True)
    assert "PYTHONNOUSERSITE" not in candidate_env({}, workdir=str(tmp_path))


def test_without_the_sandbox_the_containment_cases_are_still_caught(tmp_path, monkeypatch):
    """Where namespaces are refused (an unprivileged container) the judge falls back to undumpable processes,
    armed spares, its own watch of a stopped supervisor and snapshots: the same red-team cases, judged so."""
    from evals.judge.client import Harness, HarnessSettings
    from tests.adversarial.cases import CASES
    from tests.adversarial.runner import SECRET_VARS, Scratch, run_case

    monkeypatch.setenv("MUCUTLASS_SANDBOX", "0")  # read by the judge process this harness starts
    for k, v in SECRET_VARS.items():
        monkeypatch.setenv(k, v)
    harness = Harness(HarnessSettings(device="cpu", watchdog_s=20, n_input_sets=2))
    try:
        # (the cases that write into the host's Python installation or caches run only in the sandbox: see the
        # start-up module test below for the judge's own undo of such a write, in a folder of this test's)
        for name in ("freezes_supervisor.py", "plants_next_attempt_env.py", "stops_next_attempt.py"):
            case = next(c for c in CASES if c.file == name)
            out = run_case(harness, case, False, Scratch(tmp_path / name, harness.settings))
            assert out.caught and out.next_clean, (name, out.rule, out.problems, out.reason, out.next_reason)
    finally:
        harness.close()


class _FakeCuda:
    """The driver API's entry points as the probe calls them; ``fail`` names the one that returns an error."""

    def __init__(self, fail: str | None = None, devices: int = 1):
        self._fail, self._devices = fail, devices

    def __getattr__(self, name):
        def call(*args):
            if name == "cuDeviceGetCount":
                args[0]._obj.value = self._devices
            return 999 if name == self._fail else 0
        return call


def test_the_cuda_check_needs_a_device_it_can_allocate_on(monkeypatch):
    from evals.judge import supervisor

    def cdll_with(fake):
        def cdll(name, *a, **k):
            assert name == "libcuda.so.1"
            if fake is None:
                raise OSError("no driver")
            return fake
        return cdll

    for fake, want in ((None, None), (_FakeCuda(), True), (_FakeCuda("cuInit"), False),
                       (_FakeCuda(devices=0), False), (_FakeCuda("cuMemAlloc_v2"), False)):
        monkeypatch.setattr(supervisor.ctypes, "CDLL", cdll_with(fake))
        assert supervisor.cuda_usable() is want


@pytest.mark.skipif(not sandbox_available(), reason="no namespaces here")
def test_a_sandbox_that_loses_the_gpu_is_refused(monkeypatch):
    """Where a process inside the sandbox cannot use the GPU that processes outside it can, the probe
    says no and candidates run without the sandbox rather than every one of them failing."""
    from evals.judge import supervisor

    inside = {"v": False}
    monkeypatch.setattr(supervisor, "cuda_usable", lambda: inside["v"])
    assert supervisor.probe_sandbox() is False
    inside["v"] = None  # no CUDA driver at all: the sandbox stands
    assert supervisor.probe_sandbox() is True


def test_without_the_sandbox_a_planted_start_up_module_is_undone(tmp_path, monkeypatch):
    """Without the sandbox a candidate can write into every folder of its import path; the judge watches the top
    of each (a sitecustomize.py there would run in every later Python process) and removes what was planted. The
    folder here is this test's own, on the import path through PYTHONPATH, so nothing reaches the host's."""
    from evals.judge.client import Candidate, Harness, HarnessSettings
    from evals.problems import load_suite

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("MUCUTLASS_SANDBOX", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    problem = next(p for p in load_suite("smoke") if p.name == "02_linear_relu_tiny")
    planted = site / "sitecustomize.py"
    source = (
        "import os, sys, torch, torch.nn as nn\n"
        f"for p in sys.path:\n    if os.path.realpath(p) == {str(site)!r}:\n"
        f"        open(os.path.join(p, 'sitecustomize.py'), 'w').write('# planted\\n')\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, in_features, out_features):\n"
        "        super().__init__()\n        self.fc = nn.Linear(in_features, out_features)\n"
        "    def forward(self, x):\n        return torch.relu(self.fc(x))\n")
    harness = Harness(HarnessSettings(device="cpu", watchdog_s=30, n_input_sets=2))
    try:
        v = harness.validate(problem, Candidate.from_source(source))
    finally:
        harness.close()
    assert not v.correct and v.rule == "containment" and "sitecustomize.py" in v.reason, v.reason
    assert not planted.exists()
