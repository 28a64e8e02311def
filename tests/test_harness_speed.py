"""The judge's own cost per attempt, cut without weakening a check: the comparison reads its statistics back
once (and agrees with the element-by-element rules), input sets are drawn ahead of need but never used twice,
the judge works while the candidate answers (a request's reply is read even when that work fails), and an
ended candidate process is awaited off the reply's path but gone before the next one starts."""

from __future__ import annotations

import time

import pytest
import torch

from evals.judge import verdicts
from evals.problems import load_suite
from evals.judge.compare import compare
from evals.judge.process import Judge, Prepared
from evals.judge.settings import HarnessSettings


def _compare_elementwise(outs, refs, tol):
    """The comparison's rules written out as directly as they read (what `compare` must agree with)."""
    max_abs = max_rel = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        finite_r = torch.isfinite(r)
        bad = finite_r & ~torch.isfinite(o)
        if bool(bad.any()):
            return dict(correct=False, rule=verdicts.NONFINITE, n=int(bad.sum()), i=i)
        diff = torch.where(finite_r, (o.double() - r.double()).abs(), torch.zeros((), dtype=torch.float64))
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / r.double().abs().clamp_min(1e-12)).max()))
        close = torch.isclose(o, r, atol=tol, rtol=tol, equal_nan=True)
        if not bool(close.all()):
            return dict(correct=False, rule=verdicts.MISMATCH, n=int((~close).sum()), i=i, max_abs=max_abs)
    return dict(correct=True, rule=None, max_abs=max_abs, max_rel=max_rel)


def _cases():
    g = torch.Generator().manual_seed(7)
    r = torch.randn(64, 33, generator=g)
    big = torch.randn(3 * (1 << 20) + 5, generator=g)
    near = r + 1e-5 * torch.randn(r.shape, generator=g)
    far = r.clone()
    far[3, 4] += 1.0
    nan_out = r.clone()
    nan_out[0, 0] = float("nan")
    inf_ref = r.clone()
    inf_ref[1, 1] = float("inf")
    inf_both = inf_ref.clone()
    nan_ref = r.clone()
    nan_ref[2, 2] = float("nan")
    big_far = big.clone()
    big_far[-1] += 1.0
    big_nan = big.clone()
    big_nan[1 << 20] = float("inf")
    return {
        "equal": ([r.clone()], [r]), "near": ([near], [r]), "far": ([far], [r]), "nan_output": ([nan_out], [r]),
        "inf_in_both": ([inf_both], [inf_ref]), "inf_ref_finite_out": ([r.clone()], [inf_ref]),
        "nan_in_both": ([nan_ref.clone()], [nan_ref]), "nan_ref_finite_out": ([r.clone()], [nan_ref]),
        "second_output_far": ([r.clone(), far], [r, r]), "empty": ([torch.empty(0, 3)], [torch.empty(0, 3)]),
        "half": ([near.half()], [r.half()]), "big_near": ([big + 1e-6], [big]), "big_far": ([big_far], [big]),
        "big_nonfinite": ([big_nan], [big]),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_compare_agrees_with_the_elementwise_rules(name):
    outs, refs = _cases()[name]
    got, want = compare(outs, refs, 1e-4), _compare_elementwise(outs, refs, 1e-4)
    assert got["correct"] == want["correct"] and got["rule"] == want["rule"], (got, want)
    if want["correct"]:
        assert got["max_abs_error"] == pytest.approx(want["max_abs"], rel=1e-12, abs=1e-300)
        assert got["max_rel_error"] == pytest.approx(want["max_rel"], rel=1e-12, abs=1e-300)
    else:
        assert f"output {want['i']}" in got["text"] and str(want["n"]) in got["text"], got["text"]


@pytest.fixture(scope="module")
def problem():
    return next(p for p in load_suite("smoke") if p.name == "02_linear_relu_tiny")


@pytest.fixture()
def judge():
    j = Judge()
    yield j
    j.close()


def test_prepared_sets_are_used_once_and_match_their_references(judge, problem):
    cpu = torch.device("cpu")
    judge.prepare(problem, cpu, "validate", 3)
    prepared = judge.prepared[judge._prepared_key(problem, cpu, "validate")]
    seeds = [s for s, _, _ in prepared.sets]
    assert prepared.shuffled is not None and prepared.shuffled[0] is not None
    b = judge.take(problem, cpu, "validate", 3)
    assert [s for s, _, _ in b.sets] == seeds and judge._prepared_key(problem, cpu, "validate") not in judge.prepared
    for seed, x, ref in b.sets:  # the reference of exactly these inputs under the bundle's model seed
        model = problem.make_model(b.model_seed, cpu)
        with torch.no_grad():
            assert torch.equal(model(*problem.make_inputs(seed, cpu)), ref[0])
            assert torch.equal(problem.make_inputs(seed, cpu)[0], x[0])
    again = judge.take(problem, cpu, "validate", 3)  # nothing prepared: fresh seeds, none seen before
    assert not set(s for s, _, _ in again.sets) & set(seeds) and again.model_seed != b.model_seed
    fixed = judge.take(problem, cpu, "validate", 2, fixed=11)
    assert [s for s, _, _ in fixed.sets] == [11, 11 + 1_000_003] and fixed.model_seed == 11


def test_preparing_stops_when_asked_and_for_another_problem(judge, problem):
    cpu = torch.device("cpu")
    calls = iter([False, False, True])
    judge.prepare(problem, cpu, "profile", 5, until=lambda: next(calls))
    assert len(judge.prepared[judge._prepared_key(problem, cpu, "profile")].sets) == 1
    judge.prepare(problem, cpu, "profile", 5, until=lambda: True)  # a request waits: nothing more
    assert len(judge.prepared[judge._prepared_key(problem, cpu, "profile")].sets) == 1
    b = judge.take(problem, cpu, "profile", 5)  # the operation completes what was prepared
    assert len(b.sets) == 5 and len({s for s, _, _ in b.sets}) == 5
    other = next(p for p in load_suite("smoke") if p.name != problem.name)
    judge.prepare(problem, cpu, "validate", 1)
    judge.prepare(other, cpu, "validate", 1)
    assert {k[0] for k in judge.prepared} == {other.path}  # the earlier problem's sets are dropped


def test_idle_prepares_the_next_attempt_and_is_no_operation_s_time(judge, problem):
    cpu = torch.device("cpu")
    judge.settings = HarnessSettings(device="cpu", cpu_timing=True)
    judge.next_up = (problem, cpu, 3, 5)
    judge.stages.seconds["compare"] = 0.0
    judge.idle(lambda: False)
    assert len(judge.prepared[judge._prepared_key(problem, cpu, "validate")].sets) == 3
    assert len(judge.prepared[judge._prepared_key(problem, cpu, "profile")].sets) == 5
    assert judge.stages.take() == {} and judge.models == {}
    judge.next_up = (problem, cpu, 3, 5)
    judge.idle(lambda: True)  # a request is waiting: the idle work yields at once
    assert judge.next_up is None


def test_prepared_sets_size(problem):
    b = Prepared(1, None)
    x = [torch.ones(4, 8)]
    b.sets.append((1, x, [torch.ones(4, 2)]))
    assert b.nbytes() == 4 * 8 * 4 + 4 * 2 * 4


class _SlowFinish:
    def __init__(self):
        self.finished = False

    def finish(self):
        time.sleep(3.0)  # far longer than the bound below, so a loaded host cannot blur the two
        self.finished = True


class _Current:
    def __init__(self):
        self.proc = _SlowFinish()


def test_an_ended_process_is_awaited_in_a_thread_and_reaped_before_the_next(judge):
    cur = _Current()
    judge.current = cur
    t0 = time.perf_counter()
    judge.end_current()
    assert time.perf_counter() - t0 < 1.5 and judge.current is None and not cur.proc.finished
    judge.reap()
    assert cur.proc.finished and judge.ending == []


def test_the_judge_works_while_the_candidate_answers_and_no_reply_is_left_unread(judge):
    judge.settings = HarnessSettings(device="cpu", spare_processes=1, memory_limit_gb=0)
    attempt = judge.attempt_for("digest", torch.device("cpu"), 60.0, fresh=True)
    first = attempt.request("ping", {}, timeout_s=300.0)  # the process is ready
    seen = []
    reply = attempt.request("ping", {"linger_s": 0.2}, during=lambda: seen.append(time.perf_counter()))
    assert seen and reply["pid"] == first["pid"]

    def fails():
        raise RuntimeError("the judge's own work failed")

    with pytest.raises(RuntimeError):
        attempt.request("ping", {}, during=fails)
    assert attempt.request("ping", {})["pid"] == first["pid"]  # its reply was read: none is left stale
    judge.end_current()
    judge.reap()
    assert judge.ending == [] and not attempt.proc.alive()


def test_digests_tell_equal_outputs_nan_for_nan():
    """Two calls' outputs are the same when their summaries' digests agree (kept instead of the outputs): NaN
    equals NaN for the repeated call, never for the input-independence check, and one changed element shows."""
    from evals.judge.compare import Keys, same, same_or_both_nan, summarize

    x = torch.randn(50)
    nan = x.clone()
    nan[5] = float("nan")
    keys = Keys([x], 16)

    def s(t):
        return summarize([t], [x], 1e-4, keys)

    assert same_or_both_nan(s(x), s(x.clone())) and same_or_both_nan(s(nan), s(nan.clone()))
    assert not same_or_both_nan(s(nan), s(x)) and not same_or_both_nan(s(x), s(x + 1))
    assert same(s(x), s(x.clone())) and not same(s(nan), s(nan.clone()))
    one = x.clone()
    one[49] += 1e-6
    assert not same(s(x), s(one))
    assert same(s(x * 0.0), s(-(x * 0.0)))  # -0.0 is 0.0, as torch.equal has it


def _pinned_round_trip():
    from evals.judge import wire

    a = wire.Arena.create(8 << 20)
    try:
        pinned = a.pin(4 << 20)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        x = torch.randn(256, 1024, device=device)  # 1 MB in the pinned part, a second one past it
        y = torch.randn(1024, 1024, device=device)
        packed, _, _ = wire.pack({"x": x, "y": y, "z": torch.randn(3, device=device)}, a)
        back = wire.unpack(packed, a, device)
        assert all(torch.equal(back[k], v) for k, v in (("x", x), ("y", y)))
    finally:
        a.close()
    assert a.pinned == 0  # unregistered before the mapping goes
    return pinned


def test_pinning_the_arena_without_cuda_changes_nothing():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: test_pinned_arena_round_trip_on_gpu")
    assert _pinned_round_trip() == 0


@pytest.mark.gpu
def test_pinned_arena_round_trip_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    assert _pinned_round_trip() == 4 << 20


def test_a_profile_s_sealed_sets_are_prepared_with_its_model(judge, problem):
    cpu = torch.device("cpu")
    judge.sealed_k[(problem.path, problem.source_hash, str(cpu))] = 7  # as the last profile of this problem staged
    judge.prepare(problem, cpu, "profile", 3)
    b = judge.take(problem, cpu, "profile", 3)
    assert len(b.sealed) == 7 and len({s for s, _, _ in b.sets + b.sealed}) == 10  # all fresh, none shared
    model = problem.make_model(b.model_seed, cpu)
    with torch.no_grad():
        for seed, x, ref in b.sealed:
            assert torch.equal(model(*problem.make_inputs(seed, cpu)), ref[0])
    judge.prepare(problem, cpu, "validate", 2)  # a validation's sets carry none
    assert judge.prepared[judge._prepared_key(problem, cpu, "validate")].sealed == []
