"""The judge at KernelBench's sizes, on the CPU: the memory plan (what a judge and its candidate may hold, and a
clear refusal where even that cannot fit), the chunked comparison against the whole one, digests that see any
change, kept sets drawn again from their seeds, and a precision probe that cannot run failing the attempt as the
harness's error instead of passing without it."""

from __future__ import annotations

import pytest
import torch

from evals.judge import compare, memory, probes
from evals.judge.findings import HarnessError

GB = memory.GB
H200_SHARE = 139 * GB // 3  # three judges on one H200


@pytest.mark.parametrize("name, input_bytes, output_bytes, param_bytes", [
    ("4 GiB output from K = 32", 8 << 20, 4 << 30, 0),
    ("8 GiB matrix-vector input", 8 << 30, 8 << 10, 0),
    ("4 GiB parameter", 8 << 20, 8 << 20, 4 << 30),
    ("8 GiB conv output", 384 << 20, 8 << 30, 0),
    ("6 GiB conv output", 768 << 20, 6 << 30, 0),
])
def test_kernelbench_s_largest_sizes_fit_three_judges_per_gpu(name, input_bytes, output_bytes, param_bytes):
    plan = memory.plan(memory.Footprint(input_bytes, output_bytes, param_bytes), H200_SHARE)
    assert plan.refusal == "", (name, plan)
    assert plan.judge_need_bytes <= plan.judge_bytes and plan.candidate_need_bytes <= plan.candidate_bytes
    assert plan.judge_bytes + plan.candidate_bytes == H200_SHARE
    assert plan.timing_sets >= 1 and plan.host_limit_bytes >= memory.HOST_FLOOR_BYTES


def test_a_small_problem_keeps_its_sets_and_prepares_ahead():
    plan = memory.plan(memory.Footprint(1 << 20, 1 << 20, 1 << 20), H200_SHARE)
    assert plan.hold_references and plan.timing_sets == 3 and plan.prepared_bytes > 1 << 30
    assert plan.host_limit_bytes == memory.HOST_FLOOR_BYTES


def test_where_references_do_not_fit_the_judge_keeps_seeds():
    big = memory.Footprint(384 << 20, 8 << 30, 0)
    assert not memory.plan(big, H200_SHARE).hold_references
    assert not memory.plan(big, 139 * GB).hold_references  # an output over 1 GiB: drawn again, even alone on the GPU
    assert memory.plan(memory.Footprint(384 << 20, 512 << 20, 0), H200_SHARE).hold_references
    assert memory.plan(big, H200_SHARE).prepared_bytes == 0  # nothing drawn ahead of need either


def test_a_problem_no_share_can_hold_is_refused_in_one_line_that_says_why_and_what_to_do():
    plan = memory.plan(memory.Footprint(40 << 30, 40 << 30, 0), H200_SHARE)
    assert plan.refusal.startswith("the harness cannot judge this problem here")
    assert "MUCUTLASS_JUDGES_PER_GPU" in plan.refusal and "\n" not in plan.refusal
    assert "inputs 40.00 GB" in plan.refusal


def test_on_the_cpu_the_host_limit_grows_with_the_problem_and_a_limit_of_zero_is_none():
    small = memory.plan(memory.Footprint(1 << 20, 1 << 20, 0), 0, on_gpu=False)
    large = memory.plan(memory.Footprint(2 << 30, 2 << 30, 1 << 30), 0, on_gpu=False)
    assert small.host_limit_bytes == memory.HOST_FLOOR_BYTES
    assert large.host_limit_bytes > 2 * (2 * (2 << 30) + (1 << 30))
    assert memory.plan(memory.Footprint(1, 1, 0), 0, on_gpu=False, host_floor_bytes=0).host_limit_bytes == 0


def test_the_candidate_s_window_of_earlier_outputs_follows_the_plan():
    from evals.judge.candidate import held_outputs

    small = [torch.empty(1 << 10) for _ in range(5)]
    assert held_outputs(small[:-1], small[-1:]) == small  # a small problem: every output held
    big = [torch.empty(64 << 20) for _ in range(4)]  # 256 MiB each: two earlier held (512 MiB)
    kept = held_outputs(big[:-1], big[-1:])
    assert kept == big[2:] and memory.held_earlier(256 << 20) == 2  # the last two calls: a ring of two shows
    huge = [torch.empty(3 << 29)]  # 6 GiB: none held between calls (the next call holds only its own)
    assert held_outputs(big, huge) == [] and memory.held_earlier(512 << 20) == 2 and memory.held_earlier(6 << 30) == 0


@pytest.mark.parametrize("chunk", [7, 64, 1 << 24])
def test_the_chunked_comparison_is_the_whole_comparison(chunk, monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(37, 11, generator=g)
    near = ref + 1e-6 * torch.randn(37, 11, generator=g)
    far = ref.clone()
    far[30, 5] += 1.0
    far[2, 1] -= 3.0
    nonfinite = ref.clone()
    nonfinite[36, 10] = float("inf")
    for outs, correct, rule in (([near], True, None), ([far], False, "mismatch"), ([nonfinite], False, "nonfinite")):
        got = compare.compare(outs, [ref], 1e-4)
        assert got["correct"] == correct and got["rule"] == rule, got
        diff = (outs[0].double() - ref.double()).abs()
        if rule != "nonfinite":
            assert got["max_abs_error"] == pytest.approx(float(diff.max()), rel=1e-12)
            assert got["max_rel_error"] == pytest.approx(float((diff / ref.double().abs().clamp_min(1e-12)).max()),
                                                         rel=1e-12)
        if rule == "mismatch":
            assert "2 of 407 elements" in got["text"]


def test_samples_are_secret_positions_the_same_for_every_call_of_an_operation():
    ref = torch.randn(1000)
    keys = compare.Keys([ref], 100)
    again = compare.Keys([ref], 100)
    assert keys.positions[0].numel() <= 100 and torch.all(keys.positions[0][1:] > keys.positions[0][:-1])
    assert not torch.equal(keys.positions[0], again.positions[0])  # each operation draws its own
    a, b = keys.sample([ref]), keys.sample([ref.clone()])
    assert torch.equal(a[0], b[0]) and torch.equal(a[0], ref[keys.positions[0]].double())
    whole = compare.Keys([ref], 4096)
    assert torch.equal(whole.positions[0], torch.arange(1000))  # a small output is kept whole


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float64])
def test_content_digests_see_any_changed_bit_and_agree_between_processes(dtype):
    x = (torch.rand(3000) * 100).to(dtype)
    d = compare.content_digests([x, 5], seed=123)
    assert d[1] is None and d == compare.content_digests([x.clone(), 5], seed=123)
    y = x.clone()
    y.view(torch.uint8)[1777] ^= 1  # one bit
    assert compare.content_digests([y], seed=123) != d[:1]
    assert compare.content_digests([x], seed=124) != d[:1]  # keyed: another call's key gives another digest


class _Double:
    """A model whose float64 run fails the way a given exception does."""

    def __init__(self, exc: BaseException):
        self.exc = exc
        self.layer = torch.nn.Linear(4, 4)

    def parameters(self):
        return self.layer.parameters()

    def buffers(self):
        return self.layer.buffers()

    def __call__(self, x):
        if x.dtype == torch.float64:
            raise self.exc
        return self.layer(x)


def test_a_probe_that_runs_out_of_memory_fails_the_attempt_as_the_harness_s(monkeypatch):
    monkeypatch.setattr(probes, "at_level", lambda model, level: model)
    x = [torch.rand(2, 4)]
    ref = [torch.rand(2, 4)]
    with pytest.raises(HarnessError, match="the precision probe could not run: OutOfMemoryError"):
        probes.signatures(_Double(torch.OutOfMemoryError("CUDA out of memory")), x, ref)
    # a reference with no float64 kernel says nothing on this problem (no probe), which is not the judge's failure
    assert probes.signatures(_Double(RuntimeError('"addmm" not implemented for \'Double\'')), x, ref) is None


def test_a_kept_set_is_drawn_again_from_its_seed_and_checked():
    from evals.judge.validation import Validation

    class Judge:
        draws = 0

        def inputs(self, problem, seeds, device):
            Judge.draws += 1
            g = torch.Generator().manual_seed(seeds[0] + (1 if problem.drift and Judge.draws > 1 else 0))
            return [[torch.rand(8, generator=g)]]

        def reference(self, problem, seed, x):
            return [x[0] * 2]

    class Plan:
        hold_references = False

    class Problem:
        path, tolerance, drift = "p.py", 1e-2, False

    class Bundle:
        model_seed, model = 1, None

    class Settings:
        probe_budget_s, sample_elements = 0.0, 1024

    problem = Problem()
    v = Validation(Judge(), None, problem, "cpu", Settings(), Bundle(), 2, 1, Plan())
    x = Judge().inputs(problem, [7], "cpu")[0]
    v.keep(0, 7, x, [x[0] * 2])
    x_again, ref_again = v.kept(0)
    assert torch.equal(x_again[0], x[0]) and torch.equal(ref_again[0], x[0] * 2)
    problem.drift = True  # a get_inputs that is not a function of its seed
    with pytest.raises(HarnessError, match="other values under the same seed"):
        v.kept(0)


def test_a_probe_runs_the_levels_it_can_find_and_the_coarsest_it_allows():
    assert probes.probed_levels(("f32", "tf32", "bf16", "f16")) == ("bf16", "fp8")
    assert probes.probed_levels(("f32", "tf32")) == ("tf32", "f16", "bf16", "fp8")
    assert probes.probed_levels(("f32",)) == ("tf32", "f16", "bf16", "fp8")
    assert probes.probed_levels(None) == probes.LEVELS
    layer = torch.nn.Linear(64, 32)
    x, ref = [torch.rand(16, 64)], None
    with torch.no_grad():
        ref = [layer(x[0])]
    sig = probes.signatures(layer, x, ref, allowed=("f32", "tf32", "bf16", "f16"))
    assert set(sig["errors"]) == {"f32", "bf16", "fp8"} and sig["errors"]["fp8"] > 4 * sig["errors"]["bf16"]
    level, _ = probes.judge([probes.run_at(layer, x, "fp8")[0]], sig, ("f32", "tf32", "bf16", "f16"))
    assert level == "fp8"


def test_float64_runs_that_do_not_fit_the_gpu_run_on_the_host(monkeypatch):
    """An out-of-memory error in a float64 run moves the probe to the host (slower, whole): the probe runs, and only
    a failure there too is the harness's error."""
    real = probes._signatures_on
    calls = []

    def first_oom(model, input_sets, refs32, positions, allowed):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(model, input_sets, refs32, positions, allowed)

    monkeypatch.setattr(probes, "_signatures_on", first_oom)
    layer = torch.nn.Linear(16, 8)
    x = [torch.rand(4, 16)]
    with torch.no_grad():
        ref = [layer(x[0])]
    sig = probes.signatures(layer, x, ref, allowed=("f32", "tf32"))
    assert sig is not None and len(calls) == 2 and set(sig["errors"]) >= {"f16", "bf16", "fp8"}


def test_a_separable_model_s_float64_runs_are_made_in_slices_and_give_the_same_signature(monkeypatch):
    """A float64 run larger than SLICE_BYTES is made a slice of the first input's rows at a time where the model is
    separable so (checked on a few rows against the reference), with the same sampled values and errors as a whole
    run; a model whose rows depend on each other (batch statistics) is run whole."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 48)
    x = [torch.rand(96, 64)]
    with torch.no_grad():
        ref = [layer(x[0])]
    keys = compare.Keys(ref, 1000)
    whole = probes.signatures(layer, x, ref, keys.positions, ("f32", "tf32"))
    monkeypatch.setattr(probes, "SLICE_BYTES", 4096)  # so small that every run is sliced
    assert probes.row_slices(layer, x, ref) is not None
    sliced = probes.signatures(layer, x, ref, keys.positions, ("f32", "tf32"))
    for a, b in zip(whole["exact"], sliced["exact"]):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)
    assert whole["errors"] == pytest.approx(sliced["errors"], rel=1e-9)

    class BatchStats(torch.nn.Module):
        def forward(self, x):
            return x - x.mean(dim=0, keepdim=True)

    with torch.no_grad():
        assert probes.row_slices(BatchStats(), x, [BatchStats()(x[0])]) is None


def test_a_model_relative_to_its_first_row_is_not_sliced(monkeypatch):
    monkeypatch.setattr(probes, "SLICE_BYTES", 4096)

    class FirstRow(torch.nn.Module):
        def forward(self, x):
            return x - x[:1]

    x = [torch.rand(64, 32)]
    with torch.no_grad():
        assert probes.row_slices(FirstRow(), x, [FirstRow()(x[0])]) is None


@pytest.mark.parametrize("numel", [10, 1000, 4099])
def test_the_reordered_set_of_a_large_input_is_drawn_block_by_block(monkeypatch, numel):
    """Set 1's values in another order: first and last kept, the same values, a different order in every block; an
    input larger than a block never needs a permutation index of its own size (a 16 GiB index for an 8 GiB input
    ran the judge out of its share)."""
    from evals.judge.checks import dependence

    monkeypatch.setattr(dependence, "PERMUTED_BLOCK_ELEMENTS", 256)
    x = torch.arange(numel, dtype=torch.float32).reshape(-1, 1) if numel % 2 else torch.arange(numel, dtype=torch.float32)
    (y,) = dependence.interior_permutation([x])
    fy, fx = y.reshape(-1), x.reshape(-1)
    assert y.shape == x.shape and fy[0] == fx[0] and fy[-1] == fx[-1]
    assert torch.equal(torch.sort(fy).values, fx)  # the same values
    interior = min(numel - 2, 256)
    for a in range(1, numel - 1, interior):  # each block holds its own values, in another order
        b = min(numel - 1, a + interior)
        assert torch.equal(torch.sort(fy[a:b]).values, fx[a:b])
        if b - a > 3:
            assert not torch.equal(fy[a:b], fx[a:b])


def test_the_rotated_set_moves_every_interior_value_one_place_and_keeps_the_ends():
    from evals.judge.checks import dependence

    x = torch.randn(5, 7)
    y, i = dependence.interior_rotation([x, torch.arange(3)])
    fx, fy = x.reshape(-1), y.reshape(-1)
    assert y.shape == x.shape and fy[0] == fx[0] and fy[-1] == fx[-1] and torch.equal(i, torch.arange(3))
    assert torch.equal(fy[2:-1], fx[1:-2]) and fy[1] == fx[-2]
    assert dependence.interior_rotation([torch.arange(10)]) is None  # no float tensor: no rotated set


def test_each_stage_records_the_peak_the_judge_held_in_it_and_an_oom_names_the_largest_tensors():
    from evals.judge.attempt import Stages
    from evals.judge.process import _largest_tensors

    marks = iter([0, 100 << 20, 300 << 20, 50 << 20, 0])  # peaks since the last mark: before, inside, ...
    stages = Stages(lambda: next(marks))
    with stages("reference"):
        assert stages.current == "reference"
        with stages("probes"):
            assert stages.current == "reference/probes"
    assert stages.take_peaks() == {"reference": 100.0, "probes": 300.0}  # an outer stage keeps its own peak
    held = torch.ones(80 << 20, dtype=torch.uint8)
    assert "0.08 GiB uint8[83886080]" in _largest_tensors(torch.device("cpu"))
    del held


def test_a_reference_s_own_work_space_is_in_the_judge_s_plan():
    """relu(conv(x)) holds two 8 GiB outputs at once, and cuDNN a work space beside them: a reference drawn needs
    more than its output, and the plan that ignored it let the judge run out inside its share."""
    plain = memory.Footprint(384 << 20, 8 << 30, 0)
    measured = memory.Footprint(384 << 20, 8 << 30, 0, reference_work_bytes=(8 << 30) + (1 << 30))
    a, b = memory.plan(plain, H200_SHARE), memory.plan(measured, H200_SHARE)
    assert b.judge_need_bytes - a.judge_need_bytes == 1 << 30
    assert b.judge_bytes >= b.judge_need_bytes and not b.refusal
    small = memory.plan(memory.Footprint(1 << 20, 1 << 20, 0, reference_work_bytes=1 << 20), H200_SHARE)
    assert small.judge_need_bytes == memory.plan(memory.Footprint(1 << 20, 1 << 20, 0), H200_SHARE).judge_need_bytes


class _KeepsItsOutput(torch.nn.Module):
    """Writes every answer into one buffer it keeps and returns it (the reused-output cheat)."""

    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if self.out is None:
            self.out = torch.empty_like(x)
        return torch.mul(x, 2.0, out=self.out)


class _Fresh(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


def _runner_calls(model, n=3):
    from evals.judge.candidate import Runner

    runner = Runner()
    runner.instances[0] = model
    replies = []
    for i in range(n):
        x = torch.full((1 << 12,), float(i))
        replies.append(runner.op_call({"instance": 0, "inputs": [x], "input_key": 1}))
    return replies


@pytest.mark.parametrize("window_bytes", [None, 0])  # the plan's window; 0: an output too large to hold (> 1 GiB)
def test_an_output_returned_again_is_seen_whether_or_not_earlier_outputs_are_held(window_bytes, monkeypatch):
    """A storage the model keeps and returns again is seen through a weak reference to every earlier output's
    storage, which holds no memory: a 4 GiB output reused on every call was accepted while no earlier output
    over 1 GiB is held. A fresh output whose block the allocator hands out again is not flagged."""
    if window_bytes is not None:
        monkeypatch.setattr(memory, "held_window_bytes", lambda size: window_bytes)
    cheat = _runner_calls(_KeepsItsOutput())
    assert cheat[0]["output_problems"] == [""]
    assert all("earlier call" in r["output_problems"][0] for r in cheat[1:])
    honest = _runner_calls(_Fresh())
    assert all(r["output_problems"] == [""] for r in honest)
