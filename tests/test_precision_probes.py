"""What the judge measures around the timed calls, on the CPU: precision on every output it reads
(evals.judge.probes, evals.judge.process), f16's range probed inside its range as well as past it, the timed calls'
outputs probed like the validation's; and the thread rule (evals.judge.candidate): a thread of the
candidate's may exist, as the runtime's compile workers do, but not run while it is timed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from judge_fixtures import cpu_harness

from evals.judge import probes

HERE_ADV = Path(__file__).resolve().parent / "adversarial"


def _linear(k: int = 64, n: int = 32):
    torch.manual_seed(0)
    return torch.nn.Linear(k, n)


def test_the_in_range_probe_holds_in_f16_but_its_sums_overflow_f16_arithmetic():
    model = _linear()
    x = [torch.rand(16, 64)]  # all positive, as most problems' inputs
    signs = probes.in_range_probe(x, seed=7)[0]
    assert signs.abs().max() == probes.IN_RANGE_MAGNITUDE < probes.F16_MAX
    assert torch.equal(signs.half().float(), signs)  # f16 stores every value exactly: no operand overflows
    assert (signs > 0).any() and (signs < 0).any()
    with torch.no_grad():
        probe = probes.signatures(model, [signs], [model(signs)])
    errs = probe["errors"]
    assert math.isinf(errs["f16"]) and errs["tf32"] < 1e-3 and errs["bf16"] < 1e-2
    # a candidate whose arithmetic is f16 overflows there; fp32 does not
    with torch.no_grad():
        half = [torch.nn.functional.linear(signs.half(), model.weight.half(), model.bias.half()).float()]
        assert probes.judge(half, probe, ("f32", "tf32"))[0] == "f16"
        assert probes.judge([model(signs)], probe, ("f32", "tf32"))[0] is None
    # another seed, other signs: nothing about the probe repeats
    assert not torch.equal(probes.in_range_probe(x, seed=8)[0], signs)


def test_signatures_of_several_sets_are_those_of_each_set():
    model = _linear()
    sets = [[torch.rand(8, 64)] for _ in range(3)]
    with torch.no_grad():
        refs = [[model(*s)] for s in sets]
        many = probes.signatures_many(model, sets, refs)
        for s, r, m in zip(sets, refs, many):
            one = probes.signatures(model, s, r)
            assert one["errors"] == m["errors"]


# ---------------------------------------------------------------------------------------------
# Through the judge, on the CPU (cpu_timing): a precision switched on only once the candidate is timed

_PROBLEM = '''
import torch
import torch.nn as nn

batch_size, in_features, out_features = 64, 128, 96


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# fp32 on an instance's first few calls (all a validation makes of it on one input set), bf16 from then on:
# the timed calls, and their re-runs on new values, compute in bf16
_BF16_WHEN_TIMED = '''
import torch
import torch.nn as nn

_low = getattr(torch, "b" + "float" + str(16))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 2:
            return torch.relu(self.fc(x))
        w, b = self.fc.weight.to(_low), self.fc.bias.to(_low)
        return torch.relu(torch.addmm(b, x.to(_low), w.t())).to(x.dtype)
'''

_HONEST = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
'''


@pytest.fixture(scope="module")
def timing_harness(tmp_path_factory):
    yield from cpu_harness(tmp_path_factory, cpu_timing=True, n_input_sets=3)


def _tf32_problem(tmp_path_factory, name: str, source: str):
    from evals.problems import load_problem

    path = tmp_path_factory.mktemp("problem") / name
    path.write_text(source)
    p = load_problem(path)
    p.allowed_precisions = ("f32", "tf32")
    return p


@pytest.fixture(scope="module")
def tf32_problem(tmp_path_factory):
    return _tf32_problem(tmp_path_factory, "linear_relu_128.py", _PROBLEM)


@pytest.fixture(scope="module")
def tf32_ms_problem(tmp_path_factory):
    """A call of milliseconds on one CPU thread: where a test needs an honest time to stand, since on a loaded
    two-core host the sealed bound of a 30 us call is noise (docs/harness.md: the CPU)."""
    return _tf32_problem(tmp_path_factory, "linear_relu_512.py",
                         _PROBLEM.replace("64, 128, 96", "256, 512, 512"))


def test_a_precision_switched_on_for_the_timed_calls_is_measured_on_their_outputs(timing_harness, tf32_problem):
    from evals.judge.client import Candidate

    t = timing_harness.profile(tf32_problem, Candidate.from_source(_BF16_WHEN_TIMED))
    assert not t.valid and t.rule == "precision", t.reason
    assert "bf16" in t.reason and "timed" in t.reason


# fp32 on the first instance (the validation's), f16 on later ones (the profile's): f16's mantissa is TF32's, so
# only its range tells it apart, and the validation's range probes ran on the fp32 instance
_F16_ON_LATER_INSTANCES = (HERE_ADV / "f16_on_later_instances.py").read_text()


def test_f16_switched_on_for_a_later_instance_overflows_on_a_range_probe_run_as_a_timed_call(timing_harness,
                                                                                              tf32_problem):
    from evals.judge.client import Candidate

    cand = Candidate.from_source(_F16_ON_LATER_INSTANCES)
    v = timing_harness.validate(tf32_problem, cand)
    assert v.correct and v.rule in (None, "pytorch_only"), v.reason  # the validation's instance computes in fp32
    t = timing_harness.profile(tf32_problem, cand)
    assert not t.valid and t.rule == "precision", t.reason
    assert "f16" in t.reason and "as a timed call" in t.reason


def test_an_honest_candidates_timed_outputs_carry_no_lower_precision(timing_harness, tf32_ms_problem):
    from evals.judge.client import Candidate

    t = timing_harness.profile(tf32_ms_problem, Candidate.from_source(_HONEST))
    assert t.valid, t.reason
    assert t.rule in (None, "pytorch_only")


def test_the_thread_rule_counts_cpu_spent_while_timed_not_threads_alive():
    from evals.judge import candidate as cr

    before = {1: ("idle", 0.50), 2: ("launcher", 0.10)}
    after = {1: ("idle", 0.5001), 2: ("launcher", 0.30), 3: ("started while timed", 0.05)}
    assert cr.busy_threads(before, after, region_s=1.0) == ["launcher (200.0 ms of CPU)",
                                                           "started while timed (50.0 ms of CPU)"]
    assert cr.busy_threads(before, before, region_s=1.0) == []


# a thread that waits, as a compile pool's reader thread or an async-compile worker does
_IDLE_THREAD = _HONEST + '''

import threading

_wake = threading.Event()
threading.Thread(target=_wake.wait, name="compile-worker-reader", daemon=True).start()
'''

# a thread that keeps computing beside the calls (a precomputation, a launcher that never stops). Its Python
# loop holds the GIL through whole switch intervals, so it runs inside any timed region, however short and
# however loaded the host: the main thread cannot finish a call without waiting for it.
_BUSY_THREAD = _HONEST + '''

import threading


def _spin():
    a = torch.rand(256, 256)
    while True:
        total = 0
        for i in range(200_000):
            total += i
        torch.mm(a, a)


threading.Thread(target=_spin, name="prefetch", daemon=True).start()
'''


def test_an_idle_thread_of_the_runtime_is_not_timing_tampering(timing_harness, tf32_ms_problem):
    from evals.judge.client import Candidate

    t = timing_harness.profile(tf32_ms_problem, Candidate.from_source(_IDLE_THREAD))
    assert t.valid, t.reason


def test_a_thread_that_runs_while_timed_is_timing_tampering(timing_harness, tf32_problem):
    from evals.judge.client import Candidate

    t = timing_harness.profile(tf32_problem, Candidate.from_source(_BUSY_THREAD))
    assert not t.valid and t.rule == "timing_tampered", t.reason
    assert "prefetch" in t.reason


# ---------------------------------------------------------------------------------------------
# The probe's budget: past it, a sample the candidate cannot foresee, never fewer than two sets

# fp32 on the instance's first call only, bf16 on every later one
_BF16_AFTER_FIRST = _BF16_WHEN_TIMED.replace("self.calls <= 2", "self.calls <= 1")


@pytest.fixture(scope="module")
def sampling_harness(tmp_path_factory):
    # a budget no signature run fits: every check probes the smallest sample
    yield from cpu_harness(tmp_path_factory, n_input_sets=5, probe_budget_s=1e-9)


def test_past_its_budget_the_probe_judges_a_sample_of_two_sets(sampling_harness, tf32_problem):
    from evals.judge.client import Candidate

    v = sampling_harness.validate(tf32_problem, Candidate.from_source(_HONEST))
    assert v.correct, v.reason
    probed, judged = v.info["probed_sets"]
    assert probed == 2 and judged == 5


def test_a_sample_still_catches_a_precision_lowered_after_the_first_call(sampling_harness, tf32_problem):
    """Whichever two sets are drawn, one of the outputs judged against them came from a bf16 call (the
    repeated call on set 1 does, when set 1 is drawn), so the sample cannot miss it."""
    from evals.judge.client import Candidate

    for _ in range(2):
        v = sampling_harness.validate(tf32_problem, Candidate.from_source(_BF16_AFTER_FIRST))
        assert not v.correct and v.rule == "precision", v.reason
