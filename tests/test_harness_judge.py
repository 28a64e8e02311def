"""The judge's design on the CPU: the candidate runs in its own process and every property the
judge claims (channel, outputs, inputs, framework state, containment, precision, work share) is
checked by attacking it. Each case is judged for the rule it breaks; the honest one after it must
pass (nothing a candidate does reaches the next attempt)."""

from __future__ import annotations

import os
import time
import textwrap
from pathlib import Path

import pytest

from evals.judge import verdicts
from evals.judge.client import Candidate
from evals.problems import load_problem, load_suite
from evals.judge.sandbox import PROJECT_ROOT, candidate_env, changed_paths, snapshot
from tests.adversarial.shared import shared_harness

HEAD = """
import os, sys, time, threading
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
"""
HONEST = HEAD + "        return torch.relu(self.fc(x))\n"


def body(text: str, prelude: str = "") -> str:
    return textwrap.dedent(prelude) + HEAD + textwrap.indent(textwrap.dedent(text), " " * 8)


@pytest.fixture(scope="module")
def problem():
    return next(p for p in load_suite("smoke") if p.name == "02_linear_relu_tiny")


@pytest.fixture(scope="module")
def harness():
    return shared_harness(device="cpu", watchdog_s=30, n_input_sets=3)


def judge(harness, problem, source):
    v = harness.validate(problem, Candidate.from_source(source))
    after = harness.validate(problem, Candidate.from_source(HONEST))
    assert after.correct and after.rule in (None, "pytorch_only"), f"the next attempt was not clean: {after.reason}"
    return v


CASES = {
    # 3. outputs
    "subclass": ("output_type", body("""
        class Sneaky(torch.Tensor):
            def __eq__(self, other):
                return True
        return torch.relu(self.fc(x)).as_subclass(Sneaky)
    """)),
    "meta": ("output_type", body("return torch.empty(x.shape[0], self.fc.out_features, device='meta')")),
    "view_of_input": ("output_type", body("return x.as_strided((x.shape[0], self.fc.out_features), (16, 1))")),
    "wrong_dtype": ("output_type", body("return torch.relu(self.fc(x)).double()")),
    "mutates_input": ("inputs_mutated", body("""
        y = torch.relu(self.fc(x))
        x.mul_(0.5)
        return y
    """)),
    # 2. framework state, at import and inside forward
    "default_dtype_at_import": ("framework_state", body("return torch.relu(self.fc(x))",
                                                        "import torch\ntorch.set_default_dtype(torch.float64)\n")),
    "tf32_in_forward": ("framework_state", body("""
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.relu(self.fc(x))
    """)),
    "grad_on": ("framework_state", body("""
        torch.set_grad_enabled(True)
        return torch.relu(self.fc(x))
    """)),
    # 4. correctness: the output must follow the input, on every call
    "content_cache": ("input_independent", body("""
        if not hasattr(self, "first"):
            self.first = torch.relu(self.fc(x))
        return self.first.clone()
    """)),
    "second_call_wrong": ("mismatch", body("""
        self.n = getattr(self, "n", 0) + 1
        y = torch.relu(self.fc(x))
        return y if self.n % 4 else y * 1.5
    """)),
    "nan": ("nonfinite", body("""
        y = torch.relu(self.fc(x))
        y[0, 0] = float('nan')
        return y
    """)),
    # 9. the channel: a forged reply written on the socket, or an exit right after answering
    "forged_frame": ("channel", body("""
        import struct
        for fd in os.listdir('/proc/self/fd'):
            try:
                if os.readlink(f'/proc/self/fd/{fd}').startswith('socket:'):
                    os.write(int(fd), struct.pack('>Q', 5) + b'hello')
            except OSError:
                pass
        return torch.relu(self.fc(x))
    """)),
    "exit_after_answer": ("crash", body("""
        threading.Timer(0.05, lambda: os._exit(0)).start()
        return torch.relu(self.fc(x))
    """)),
    # 8. containment
    "writes_project": ("containment", body(f"""
        open({str(PROJECT_ROOT / 'evals' / 'zz_planted.py')!r}, 'w').write('x = 1\\n')
        return torch.relu(self.fc(x))
    """)),
    "daemon": ("containment", body("""
        if not hasattr(self, "forked"):
            self.forked = True
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(600)
                os._exit(0)
            os.wait()
        return torch.relu(self.fc(x))
    """)),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_attack_is_caught_for_its_rule(harness, problem, name):
    from evals.judge.sandbox import sandbox_available

    rule, source = CASES[name]
    planted = PROJECT_ROOT / "evals" / "zz_planted.py"
    try:
        v = judge(harness, problem, source)
        written = planted.exists()
    finally:
        planted.unlink(missing_ok=True)
    if name == "writes_project" and sandbox_available():
        # in the sandbox the kernel refuses the write: the candidate's open raises, nothing is written
        assert not written and v.rule == "crash" and "Read-only file system" in v.reason, v.reason
        return
    assert not v.correct and v.rule == rule, v.reason
    assert v.reason.startswith(rule + ": ") and "\n" not in v.reason
    assert rule in verdicts.RULES


def test_prints_are_not_the_channel(harness, problem):
    src = body("""
        print('{"id": 1, "ok": true, "result": {"sets": []}}')
        sys.stderr.write('correct=True\\n')
        return torch.relu(self.fc(x))
    """)
    v = harness.validate(problem, Candidate.from_source(src))
    assert v.correct and v.rule in (None, "pytorch_only"), v.reason


def test_memory_limit_kills_the_tree(problem):
    h = shared_harness(device="cpu", watchdog_s=20, n_input_sets=2, memory_limit_gb=0.8)
    src = body("""
        hog = bytearray(1200 * 1024 * 1024)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        time.sleep(5)
        return torch.relu(self.fc(x))
    """)
    v = h.validate(problem, Candidate.from_source(src))
    assert v.rule == "containment" and "memory limit" in v.reason, v.reason
    assert h.validate(problem, Candidate.from_source(HONEST)).correct


def test_seed_never_reaches_the_candidate(problem):
    """The input seeds stay in the judge: the candidate sees neither them nor the problem's module."""
    src = body("""
        holders = [n for n, m in list(sys.modules.items()) if isinstance(getattr(m, 'Model', None), type) and callable(getattr(m, 'get_inputs', None))
                   and not n.startswith('torch')]
        assert not holders, holders
        assert os.getcwd() not in sys.path and '' not in sys.path, (os.getcwd(), sys.path)
        return torch.relu(self.fc(x))
    """)
    v = shared_harness(device="cpu", watchdog_s=10, n_input_sets=3).validate(problem, Candidate.from_source(src))
    assert v.correct, v.reason


def test_tf32_is_measured_when_only_f32_is_allowed(problem):
    src = body("""
        def r(t):
            b = t.contiguous().view(torch.int32)
            return ((b + 0x1000) & ~0x1FFF).view(torch.float32)
        return torch.relu(r(x) @ r(self.fc.weight).t() + self.fc.bias)
    """)
    strict = load_problem(problem.path)
    strict.allowed_precisions = ("f32",)
    h = shared_harness(device="cpu", watchdog_s=10, n_input_sets=3)
    v = h.validate(strict, Candidate.from_source(src))
    assert v.rule == "precision" and "tf32" in v.reason, v.reason
    tf32_ok = load_problem(problem.path)
    tf32_ok.allowed_precisions = ("f32", "tf32")
    assert h.validate(tf32_ok, Candidate.from_source(src)).correct  # TF32 where TF32 is allowed passes
    assert h.validate(strict, Candidate.from_source(HONEST)).correct  # and true fp32 is never taken for less


def test_secrets_are_not_in_the_candidates_environment():
    env = candidate_env({"OPENAI_API_KEY": "x", "LANGSMITH_API_KEY": "y", "GH_TOKEN": "z", "MY_SECRET": "s",
                         "AWS_ACCESS_KEY_ID": "a", "PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"})
    assert set(env) >= {"PATH", "CUDA_VISIBLE_DEVICES"}
    assert not {"OPENAI_API_KEY", "LANGSMITH_API_KEY", "GH_TOKEN", "MY_SECRET", "AWS_ACCESS_KEY_ID"} & set(env)


def test_snapshot_sees_new_changed_and_removed_files(tmp_path):
    strict, shared = tmp_path / "project", tmp_path / "cache"
    strict.mkdir(), shared.mkdir()
    (strict / "a.py").write_text("a")
    old = shared / "old.so"
    old.write_text("x")
    os.utime(old, (1, 1))  # long settled: no build beside the attempt owns it
    roots = [(strict, True), (shared, False)]
    before = snapshot(roots)
    (strict / "b.py").write_text("b")
    (shared / "new.so").write_text("n")  # a concurrent build's new entry: not the candidate's doing
    old.write_text("patched")
    changed = changed_paths(before, snapshot(roots))
    assert str(strict / "b.py") in changed and str(old) in changed
    assert str(shared / "new.so") not in changed


def test_vocabulary_is_one_place():
    assert verdicts.reason("mismatch", "a\nb") == "mismatch: a b"
    assert verdicts.rule_of("timing_tampered: x") == "timing_tampered" and verdicts.rule_of("nope: x") is None
    assert verdicts.first_rule(["mismatch", "inputs_mutated"]) == "inputs_mutated"
    assert verdicts.FLAG_RULES == {"pytorch_only", "sol_ceiling"} and verdicts.FLAG_RULES < set(verdicts.RULES)
    with pytest.raises(ValueError):
        verdicts.reason("cuda_error", "x")


def test_the_judge_process_cannot_be_read(harness, problem):
    """The judge holds the expected outputs and the seeds: the candidate cannot read its memory (the judge
    is undumpable, and the candidate has no CAP_SYS_PTRACE even as root)."""
    src = body("""
        sup = os.getppid()  # 0 in the sandbox: its parent is outside its PID namespace, the judge invisible
        judge = int(open(f'/proc/{sup}/stat').read().rsplit(')', 1)[1].split()[1]) if sup else None
        for what in ('mem', 'environ') if judge else ():
            try:
                with open(f'/proc/{judge}/{what}', 'rb') as f:
                    f.read(1)
                return torch.zeros(x.shape[0], self.fc.out_features)  # readable: fail the attempt
            except OSError:
                pass
        return torch.relu(self.fc(x))
    """)
    v = harness.validate(problem, Candidate.from_source(src))
    assert v.correct, v.reason


def test_the_candidate_keeps_the_hosts_absolute_import_path(tmp_path):
    # A GPU host may carry the product's dependencies on PYTHONPATH; a relative entry would resolve
    # inside the candidate's own folder, so only absolute ones are kept, after the project.
    site = str(tmp_path / "site")
    env = candidate_env({"PYTHONPATH": os.pathsep.join([site, "relative/dir", "", str(PROJECT_ROOT)])})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(PROJECT_ROOT), site]


def test_a_program_instance_gets_the_parameters_of_its_own_model_seed():
    # One candidate process serves validate and profile, each with its own model seed: a program's
    # parameters must follow the seed of the instance being built, not the one it was loaded under.
    import torch

    from evals.judge.process import Judge

    class FakeAttempt:
        instances, is_program, device = 0, True, torch.device("cpu")

        def __init__(self):
            self.requests = []

        def request(self, op, payload, timeout_s=None):
            self.requests.append((op, payload))
            return {}

    problem = load_suite("smoke")[1]  # a Linear: it has parameters
    attempt = FakeAttempt()
    judge = Judge()
    judge.build(attempt, problem, 1)
    judge.build(attempt, problem, 2)
    (_, first), (_, second) = attempt.requests
    for req, seed in ((first, 1), (second, 2)):
        expected = problem.make_model(seed, torch.device("cpu")).state_dict()
        assert req["state_dict"].keys() == expected.keys()
        assert all(torch.equal(req["state_dict"][k], expected[k]) for k in expected)
    assert not all(torch.equal(first["state_dict"][k], second["state_dict"][k]) for k in first["state_dict"])


def test_kernel_caches_are_protected_even_before_they_exist(tmp_path, monkeypatch):
    # The configured cache may not exist when the judge starts, and the user's default cache is read by
    # later runs without MUCUTLASS_CACHE_DIR: a planted entry in either is seen and removed.
    from evals.judge.sandbox import ProtectedTree, protected_roots

    configured = tmp_path / "configured"
    default = tmp_path / "xdg"
    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(configured))
    monkeypatch.setenv("XDG_CACHE_HOME", str(default))
    roots = protected_roots()
    caches = [r for r, strict in roots if not strict]
    assert configured / "kernels" in caches and default / "mucutlass" / "kernels" in caches
    tree = ProtectedTree(roots)
    before = tree.snapshot()
    planted = [configured / "kernels" / "planted-x", default / "mucutlass" / "kernels" / "planted-x"]
    built = configured / "kernels" / ("0" * 32)  # a build's entry beside the attempt is no finding
    for p in [*planted, built]:
        p.mkdir(parents=True)
        (p / "kernel.so").write_bytes(b"x")
    written = tree.written(before)
    assert sorted(written) == sorted(str(p) for p in planted)
    tree.undo(before, written)
    assert not any(p.exists() for p in planted) and built.exists()


def test_a_daemon_is_ended_while_the_attempt_still_runs(harness, problem, tmp_path):
    # A process that leaves the candidate's session is killed when the supervisor sees it, not at the
    # attempt's end: here it would act 0.5 s after escaping while the candidate is still busy for 2 s.
    marker = tmp_path / "daemon.marker"
    src = body(f"""
        if not hasattr(self, "forked"):
            self.forked = True
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(0.5)
                    open({str(marker)!r}, "w").write("acted")
                os._exit(0)
            os.wait()
            time.sleep(2.0)
        return torch.relu(self.fc(x))
    """)
    v = judge(harness, problem, src)
    assert not v.correct and v.rule == "containment", v.reason
    time.sleep(0.7)
    assert not marker.exists()


def test_a_candidate_s_allocator_grows_segments_in_place_unless_the_user_chose_one():
    from evals.judge.sandbox import CANDIDATE_ALLOC_CONF

    judge_env = {"MUCUTLASS_JUDGE_ALLOC_CONF": "expandable_segments:True,foo:1",
                 "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,foo:1"}
    assert candidate_env(judge_env)["PYTORCH_CUDA_ALLOC_CONF"] == CANDIDATE_ALLOC_CONF  # not the judge's own
    assert candidate_env({})["PYTORCH_CUDA_ALLOC_CONF"] == CANDIDATE_ALLOC_CONF
    assert candidate_env({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})["PYTORCH_CUDA_ALLOC_CONF"] == \
        "max_split_size_mb:64"
