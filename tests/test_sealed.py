"""Sealed calls (evals/judge/sealed.py): masking is exact and hides the values, the go loop computes what the
judge expects, checksums catch outputs not computed inside the timed request, and the flag rule and
its bound behave as documented. The judge-level behaviour (a candidate whose reported time is a lie)
is in tests/test_harness_cpu.py-style integration below, on the CPU with ``cpu_timing``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from judge_fixtures import cpu_harness

from evals.judge import sealed

HERE_ADV = Path(__file__).resolve().parent / "adversarial"


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(sealed.words(a.contiguous()),
                                                                      sealed.words(b.contiguous()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                                   torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn])
@pytest.mark.parametrize("shape", [(4, 3, 5), (3,), (2, 1)])
def test_mask_roundtrip_is_bit_exact(dtype, shape):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=g).mul(100)
    if dtype == torch.bool:
        x = x > 0
    elif dtype == torch.float8_e4m3fn:
        x = x.clamp(-400, 400).to(dtype)
    else:
        x = x.to(dtype)
    if dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16) and x.numel() >= 3:
        x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -0.0], dtype=dtype)
    m = sealed.mask(x, 123456789)
    assert m.dtype == x.dtype and m.shape == x.shape
    assert _bits_equal(sealed.unmask(m, 123456789), x)
    assert not _bits_equal(sealed.unmask(m, 123456788), x)  # another seed does not unmask


def test_masked_values_carry_no_information():
    x = torch.rand(4, 4096)  # values in [0, 1): a tiny part of the float32 bit space
    m = sealed.mask(x, sealed.seed())
    in_range = ((m >= 0) & (m < 1)).float().mean().item()
    assert in_range < 0.3  # uniformly random bits: about a quarter land in [0, 1) (exponents 0..126, sign +)
    assert torch.isclose(m, x).float().mean() < 0.01  # noise with its high bits clear is rare, not impossible
    assert sealed.mask(x, 1).ne(sealed.mask(x, 2)).float().mean() > 0.99


def test_cpu_noise_depends_on_all_64_bits_of_the_seed():
    """The CPU generator keeps 32 bits of a seed; seeds differing only above them must not give one mask."""
    low = sealed.fill_noise(5, torch.empty(64, dtype=torch.int32))
    assert not torch.equal(low, sealed.fill_noise(5 + (1 << 32), torch.empty(64, dtype=torch.int32)))
    assert torch.equal(low, sealed.fill_noise(5, torch.empty(64, dtype=torch.int32)))


def test_seed_is_fresh_and_positive():
    seeds = {sealed.seed() for _ in range(64)}
    assert len(seeds) == 64 and all(0 <= s < 2**63 for s in seeds)


def _model():
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 5)
    return lambda x: torch.relu(lin(x)), lin


def _entries(fn, shapes, n=2):
    entries = []
    for _ in range(n):
        inputs = [torch.zeros(s) for s in shapes]
        box = {}

        def run(inputs=inputs, box=box):
            box["out"] = fn(*inputs)

        entries.append({"inputs": inputs, "run": run, "outputs": (lambda box=box: box["out"])})
    return entries


def _stage(k, seeds_in, fn, shape=(3, 6), out_shape=(3, 5), odd=False):
    xs = [torch.randn(shape) for _ in range(k)]
    masked = [sealed.mask(torch.stack(xs), seeds_in[0])]
    staged = sealed.Staged.allocate(masked, [[list(out_shape), "float32"]], torch.device("cpu"))
    return xs, staged


def test_go_unmasks_calls_and_checksums_what_the_judge_expects():
    fn, _ = _model()
    k, mseed, cseed = 5, sealed.seed(), sealed.seed()
    xs, staged = _stage(k, [mseed], fn)
    with torch.no_grad():
        sums = sealed.run_go(staged, _entries(fn, [(3, 6)]), [mseed], cseed)
        want = torch.stack([fn(x) for x in xs])
    assert torch.equal(staged.outputs[0], want)  # every call's output, unmasked exactly
    expected, scales = sealed.expected_checksums([staged.outputs[0]], cseed)
    assert sealed.checksums_agree(sums.tolist(), expected, scales) == []
    # the checksums depend on the seed: the candidate cannot have them before the go request
    other, _ = sealed.expected_checksums([staged.outputs[0]], cseed + 1)
    assert sealed.checksums_agree(sums.tolist(), other, scales) != []


def test_go_with_the_wrong_mask_seed_computes_garbage():
    fn, _ = _model()
    mseed = sealed.seed()
    xs, staged = _stage(3, [mseed], fn)
    with torch.no_grad():
        sealed.run_go(staged, _entries(fn, [(3, 6)]), [mseed ^ 1], 1)
        want = torch.stack([fn(x) for x in xs])
    assert not torch.allclose(staged.outputs[0].nan_to_num(), want)


def test_odd_sized_sets_use_the_same_words_on_both_sides():
    """Six bytes per set (int16 words) though K sets together divide by four: judge and candidate must
    draw the same noise."""
    k, mseed = 2, sealed.seed()
    xs = [torch.randn(3).half() for _ in range(k)]
    masked = [sealed.mask(torch.stack(xs), mseed)]
    staged = sealed.Staged.allocate(masked, [[[3], "float16"]], torch.device("cpu"))
    entries = _entries(lambda x: x * 2, [(3,)])
    for e in entries:
        e["inputs"][0] = torch.zeros(3, dtype=torch.float16)
    sealed.run_go(staged, entries, [mseed], 5)
    assert torch.equal(staged.outputs[0], torch.stack(xs) * 2)


def test_checksums_catch_outputs_not_computed_in_the_request():
    fn, _ = _model()
    k, mseed, cseed = 4, sealed.seed(), sealed.seed()
    xs, staged = _stage(k, [mseed], fn)
    with torch.no_grad():
        sums = sealed.run_go(staged, _entries(fn, [(3, 6)]), [mseed], cseed).tolist()
    outs = staged.outputs[0].clone()
    outs[2, 1, 3] += 0.5  # one element of one call differs from what the go request computed
    expected, scales = sealed.expected_checksums([outs], cseed)
    assert sealed.checksums_agree(sums, expected, scales) == [2]
    assert sealed.checksums_agree(sums[:-1], expected, scales) == [0, 1, 2, 3]  # a call missing
    assert sealed.checksums_agree(["x"] * k, expected, scales) == [0, 1, 2, 3]
    assert sealed.checksums_agree([True] * k, expected, scales) == [0, 1, 2, 3]


def _candidate_checksums(outs: torch.Tensor, cseed: int) -> list[float]:
    """The checksums as the candidate's go request computes them (float32 products, float64 sums)."""
    k = outs.shape[0]
    n = min(outs[0].numel(), sealed.CHECKSUM_CHUNK)
    weights, products = torch.zeros(n), torch.zeros(n)
    out = torch.zeros(k, dtype=torch.float64)
    sealed.weighed(outs, sealed.output_seed(cseed, 0), weights, products, out)
    return out.tolist()


@pytest.mark.parametrize("chunk", [None, 4096])  # the weights of one chunk, or of many (a large output)
def test_checksum_tolerates_reduction_order_but_not_a_scaled_output(chunk, monkeypatch):
    if chunk is not None:
        monkeypatch.setattr(sealed, "CHECKSUM_CHUNK", chunk)
    g = torch.Generator().manual_seed(3)
    outs = torch.randn(3, 1000, 1000, generator=g)
    cseed = 99
    expected, scales = sealed.expected_checksums([outs], cseed)
    assert sealed.checksums_agree(_candidate_checksums(outs, cseed), expected, scales) == []
    scaled, _ = sealed.expected_checksums([outs * 1.01], cseed)
    assert sealed.checksums_agree(scaled, expected, scales) == [0, 1, 2]
    # each call weighs its outputs with its own weights: the same output in two calls has two checksums
    same = outs[:1].expand(3, 1000, 1000).contiguous()
    sums, _ = sealed.expected_checksums([same], cseed)
    assert len({round(v, 6) for v in sums}) == 3


def test_non_finite_outputs_agree_only_when_both_sides_see_them():
    outs = torch.ones(2, 4)
    outs[1, 2] = float("nan")
    expected, scales = sealed.expected_checksums([outs], 11)
    assert math.isnan(expected[1])
    assert sealed.checksums_agree([expected[0], float("nan")], expected, scales) == []
    assert sealed.checksums_agree([expected[0], 0.0], expected, scales) == [1]
    assert sealed.checksums_agree([float("nan"), float("nan")], expected, scales) == [0]


def test_choose_k_spans_the_target_within_the_caps():
    assert sealed.choose_k(1000.0, 0.0, 1 << 20, "cuda") == 5
    assert sealed.choose_k(0.01, 0.0, 1 << 10, "cuda") == sealed.K_MAX  # a claim of ~0 cannot make K unbounded
    assert sealed.choose_k(0.01, 2500.0, 1 << 10, "cuda") == sealed.K_MIN  # the I/O floor counts as time
    assert sealed.choose_k(10.0, 0.0, 600 << 20, "cuda") == 1  # the memory cap wins over K_MIN
    assert sealed.choose_k(10.0, 0.0, 1 << 20, "cpu") == sealed.K_MAX
    assert sealed.choose_k(1e6, 0.0, 1 << 20, "cpu") == sealed.K_MIN


def test_bound_rule_and_floor():
    # 10 calls in 12 ms with a 2 ms round trip and a 100 us floor per call: U = 900 us
    assert sealed.bound_us(0.012, 0.002, 10, 100.0) == pytest.approx(900.0)
    assert sealed.bound_us(0.001, 0.002, 10, 0.0) == 0.0
    beta = sealed.beta_us("cuda", 0.001, 10)
    assert beta == pytest.approx(sealed.BETA_US["cuda"] + 100.0)
    assert sealed.beta_us("cpu", 0.0, 10) == sealed.BETA_US["cpu"]
    assert sealed.tampered(300.0, 900.0, 20.0)  # 300 < 450 - 20
    assert not sealed.tampered(440.0, 900.0, 20.0)
    assert not sealed.tampered(5.0, 40.0, 20.0)  # small calls: beta dominates
    assert sealed.floor_us(4_800_000_000, 4800.0) == pytest.approx(1000.0)  # 4.8 GB at 4.8 TB/s: 1 ms
    assert sealed.floor_us(123, None) == 0.0
    # unmask and checksum passes: 4 over the inputs, 2 over the outputs, 5 fp32 passes over their elements
    assert sealed.overhead_bytes(100, 10, 40) == 400 + 80 + 200
    assert "0.5 x U" in sealed.rule_text(10.0, 900.0, 10, 20.0)


def test_bandwidth_from_the_hardware_data():
    from sol_models.hardware import get_gpu

    assert sealed.bandwidth_gbps("NVIDIA H200") == pytest.approx(get_gpu("h200").dram_bw_gbps)
    assert sealed.bandwidth_gbps("NVIDIA H100 80GB HBM3") == pytest.approx(
        max(get_gpu("h100_sxm").dram_bw_gbps, get_gpu("h100_pcie").dram_bw_gbps))
    assert sealed.bandwidth_gbps("Some Accelerator 9000") is None
    assert sealed.bandwidth_gbps(None) is None


def test_measured_floor_follows_the_bytes_and_is_per_call():
    # timed by this thread's CPU clock, so a loaded host stretches none of these ratios much
    small = sealed.measured_floor_us([torch.randn(16, 16)], [torch.randn(16, 8)])
    x, out = [torch.randn(1024, 1024)], [torch.randn(1024, 512)]
    big = sealed.measured_floor_us(x, out)
    assert 0.0 < small and big > 4 * small, (small, big)  # 4 MiB of input against 1 KiB: passes, not overhead
    # one CPU thread does not move the passes' bytes at 1 TB/s
    moved = sealed.overhead_bytes(x[0].numel() * 4, out[0].numel(), out[0].numel() * 4)
    assert big >= moved / 1e6, (big, moved)
    # one call's share of k = 8: about the k = 1 floor, not 8 times it
    per_call_of_8 = sealed.measured_floor_us(x, out, k=8)
    assert big / 4 < per_call_of_8 < big * 4, (big, per_call_of_8)


# ---------------------------------------------------------------------------------------------
# Through the judge, on the CPU (cpu_timing): an honest candidate's time stands and records the bound;
# one whose timed calls are answered from a memory of the rotated input sets is timing_tampered.

# A problem whose call takes milliseconds on one CPU thread, so that the host's scheduling noise is small
# beside it (the CPU bound is a test of the rule; on a busy host tiny calls are noise).
_PROBLEM = '''
import torch, torch.nn as nn
TOLERANCE = 1e-3
batch_size, in_features, out_features = 256, 768, 768
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

_HONEST = '''
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.relu(self.fc(x))
'''

# the timed calls rotate a few input sets, each rewritten before a call as the original scaled by a new factor:
# a buffer seen before whose sampled values are one factor times the remembered ones is answered from the
# remembered product, scaled (no GEMM); the sealed calls' sets are new: computed
_MEMO = '''
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.memory = {}
    def forward(self, x):
        seen = self.memory.get(x.data_ptr())
        if seen is not None and seen[0] != 0.0:
            first, sample, product = seen
            s = float(x[0, 0]) / first
            if torch.allclose(x[::37, ::41], sample * s, rtol=1e-5, atol=0.0):
                return torch.relu(product * s + self.fc.bias)
        product = x @ self.fc.weight.t()
        self.memory[x.data_ptr()] = (float(x[0, 0]), x[::37, ::41].clone(), product.detach())
        return torch.relu(product + self.fc.bias)
'''

# rewrites the runner (its guard function first, so nothing is reported or put back): the go request
# answers at once with made-up checksums, and the outputs are computed when they are fetched
_FORGED = '''
import sys, torch, torch.nn as nn
_runner = sys.modules["__main__"]  # the candidate runner
_runner.tampered = lambda: []
_real_fetch = _runner.Runner.op_sealed_fetch
_SEEDS = {}
def _go(self, req):
    _SEEDS["mask"] = req["mask_seeds"]
    return {"checksums": [0.0] * self.sealed.k}
def _fetch(self, req):
    from evals.judge import sealed
    sealed.run_go(self.sealed, self.graphs, [int(s) for s in _SEEDS["mask"]], 0)
    return _real_fetch(self, req)
_runner.Runner.op_sealed_go = _go
_runner.Runner.op_sealed_fetch = _fetch
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.relu(self.fc(x))
'''

_REWRITES_TIMING = (HERE_ADV / "rewrites_runner_timing.py").read_text()


@pytest.fixture(scope="module")
def cpu_timing_harness(tmp_path_factory):
    yield from cpu_harness(tmp_path_factory, cpu_timing=True, n_input_sets=3)


@pytest.fixture(scope="module")
def medium_problem(tmp_path_factory):
    from evals.problems import load_problem

    path = tmp_path_factory.mktemp("problem") / "linear_relu_768.py"
    path.write_text(_PROBLEM)
    return load_problem(path)


def test_honest_candidate_records_the_bound(cpu_timing_harness, medium_problem):
    from evals.judge.client import Candidate

    t = cpu_timing_harness.profile(medium_problem, Candidate.from_source(_HONEST))
    assert t.valid, t.reason
    assert t.timing_source == "cpu" and t.method == "cpu_process"
    s = t.sealed
    assert s["k"] >= sealed.K_MIN and s["bound_us"] > 0 and s["flagged"] is False
    assert "sealed calls" in s["method"] and s["t_us"] == pytest.approx(t.median_us)


def test_memoised_timed_calls_are_timing_tampered(cpu_timing_harness, medium_problem):
    from evals.judge.client import Candidate

    t = cpu_timing_harness.profile(medium_problem, Candidate.from_source(_MEMO))
    assert not t.valid and t.rule == "timing_tampered", t.reason
    assert t.sealed.get("flagged") is True and "sealed calls" in t.reason


def test_forged_go_reply_is_timing_tampered(cpu_timing_harness, medium_problem):
    from evals.judge.client import Candidate

    t = cpu_timing_harness.profile(medium_problem, Candidate.from_source(_FORGED))
    assert not t.valid and t.rule == "timing_tampered", t.reason
    assert "checksums" in t.reason


def test_rewritten_runner_timing_is_timing_tampered(cpu_timing_harness, medium_problem):
    """The adversarial case rewrites_runner_timing.py: no guard in the candidate's process reports it."""
    from evals.judge.client import Candidate

    t = cpu_timing_harness.profile(medium_problem, Candidate.from_source(_REWRITES_TIMING))
    assert not t.valid and t.rule == "timing_tampered", (t.median_us, t.sealed)
    assert t.sealed.get("flagged") is True and "sealed calls" in t.reason


@pytest.mark.parametrize("shape, layout", [((1, 8, 16, 16), torch.channels_last), ((3, 5, 7, 9), torch.channels_last),
                                           ((1, 4, 3, 6, 5), torch.channels_last_3d), ((2, 3000), None)])
def test_a_non_contiguous_output_is_weighed_in_row_slices_with_the_same_checksum(shape, layout):
    """A channels-last output is checksummed chunk by chunk from the rows that hold each chunk, never copied
    whole, and the checksum is the one the judge computes over the fetched (contiguous) output."""
    x = torch.randn(*shape)
    t = x.to(memory_format=layout) if layout is not None else x.t().contiguous().t()  # a transposed matrix
    assert not t.is_contiguous() and torch.equal(t, x)
    flat = x.reshape(-1)
    n = flat.numel()
    for a, b in ((0, 1), (0, n), (n // 3, n // 2), (n - 5, n)):
        assert torch.equal(sealed.flat_range(t, a, b), flat[a:b])
    stack = t.unsqueeze(0)
    w, prod = torch.zeros(n), torch.zeros(n)
    got = torch.zeros(1, dtype=torch.float64)
    sealed.weighed(stack, 123, w, prod, got)
    want = torch.zeros(1, dtype=torch.float64)
    sealed.weighed(x.unsqueeze(0), 123, w, prod, want)
    assert abs(got.item() - want.item()) <= 1e-9 * max(1.0, abs(want.item()))


@pytest.mark.parametrize("k", [1, 4])
def test_noise_is_drawn_chunk_by_chunk_alike_on_both_sides(k, monkeypatch):
    """A set larger than one noise chunk (an 8 GiB input is 128 of them) is masked and unmasked chunk by chunk
    from per-chunk seeds; the judge's in-place mask is its copying mask; and the go request restores every bit."""
    monkeypatch.setattr(sealed, "NOISE_CHUNK", 5)  # every set spans several chunks, the last one partial
    fn, _ = _model()
    mseed, cseed = sealed.seed(), sealed.seed()
    xs, staged = _stage(k, [mseed], fn)
    stack = torch.stack(xs)
    copy = sealed.mask(stack.clone(), mseed)
    inplace = stack.clone()
    bits = lambda t: t.view(torch.int32)  # noqa: E731 - masked floats are any bits, NaNs among them
    assert sealed.mask(inplace, mseed, inplace=True) is inplace and torch.equal(bits(inplace), bits(copy))
    assert torch.equal(bits(sealed.unmask(copy, mseed)), bits(stack)) and not torch.equal(bits(copy), bits(stack))
    assert staged.noise[0].numel() <= 5  # the candidate's noise buffer is one chunk, not a set
    with torch.no_grad():
        sums = sealed.run_go(staged, _entries(fn, [(3, 6)]), [mseed], cseed)
        want = torch.stack([fn(x) for x in xs])
    assert torch.equal(staged.outputs[0], want)
    expected, scales = sealed.expected_checksums([staged.outputs[0]], cseed)
    assert sealed.checksums_agree(sums.tolist(), expected, scales) == []


@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format])
def test_an_output_is_weighed_as_it_lies_and_the_judge_agrees_in_that_order(fmt):
    """A channels-last output is weighed in its memory order (a view, no copy inside the go request); the judge,
    told that order at the stage request, weighs the fetched (logically ordered) outputs the same way."""
    g = torch.Generator().manual_seed(5)
    logical = torch.randn(2, 3, 4, 5, generator=g)
    laid = logical.contiguous(memory_format=fmt)
    order = sealed.memory_order(laid)
    assert laid.permute(order).is_contiguous()
    assert (order == [0, 2, 3, 1]) == (fmt is torch.channels_last)
    masked = [sealed.mask(torch.randn(1, 3), 7)]
    staged = sealed.Staged.allocate(masked, [[list(laid.shape), "float32"]], torch.device("cpu"), [order])
    entry = {"inputs": [torch.zeros(3)], "run": lambda: None, "outputs": lambda: laid}
    sums = sealed.run_go(staged, [entry], [7], 11).tolist()
    fetched = [logical.unsqueeze(0).clone()]  # the judge's copy comes back in row-major order
    expected, scales = sealed.expected_checksums(fetched, 11, [order])
    assert sealed.checksums_agree(sums, expected, scales) == []
    if fmt is torch.channels_last:  # weighed in another order, the same values give another checksum
        other, _ = sealed.expected_checksums(fetched, 11)
        assert sealed.checksums_agree(sums, other, scales) == [0]


def test_k_calls_stacked_in_the_timed_outputs_layout():
    laid = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    order = sealed.memory_order(laid)
    masked = [sealed.mask(torch.randn(3, 6), 1)]
    staged = sealed.Staged.allocate(masked, [[list(laid.shape), "float32"]], torch.device("cpu"), [order])
    stack = staged.outputs[0]
    assert tuple(stack.shape) == (3, 2, 3, 4, 5) and stack[1].permute(order).is_contiguous()
    entry = {"inputs": [torch.zeros(6)], "run": lambda: None, "outputs": lambda: laid}
    sums = sealed.run_go(staged, [entry], [1], 4).tolist()
    assert torch.equal(stack[2], laid)
    expected, scales = sealed.expected_checksums([stack.contiguous()], 4, [order])
    assert sealed.checksums_agree(sums, expected, scales) == []


def test_a_named_order_must_be_a_permutation_of_the_dims():
    assert sealed.valid_order([0, 2, 3, 1], 4) == [0, 2, 3, 1]
    for bad in ([0, 1, 1, 2], [0, 1, 2], [0, 1, 2, 4], "0123", None, [0, 1, 2, "x"], [[0], 1, 2, 3]):
        assert sealed.valid_order(bad, 4) is None
    assert sealed.memory_order(torch.tensor(1.0)) == []
    assert sealed.memory_order(torch.zeros(1, 3, 1, 2)) in ([0, 1, 2, 3], [1, 3, 0, 2], [0, 1, 3, 2])


_SHORT_LIVED = (HERE_ADV / "short_lived_threads.py").read_text()


def test_work_in_threads_that_end_inside_the_call_is_counted(cpu_timing_harness, medium_problem):
    """The adversarial case short_lived_threads.py: the work of a thread that ended before anything read its
    clock still counts, in the reported time (the process's clock) and in the sealed bound (the kernel's count of
    every thread the candidate's processes ran, ended ones too): either the time is the work's or it is flagged."""
    from evals.judge.client import Candidate

    honest = cpu_timing_harness.profile(medium_problem, Candidate.from_source(_HONEST))
    t = cpu_timing_harness.profile(medium_problem, Candidate.from_source(_SHORT_LIVED))
    assert honest.valid, honest.reason
    assert (not t.valid and t.rule == "timing_tampered") or (t.valid and t.median_us >= 0.5 * honest.median_us), \
        (t.median_us, honest.median_us, t.sealed)
