"""The offline tier: deterministic, zero tokens, estimated order, fallbacks from the history."""

from __future__ import annotations

import pytest

from dsl_compiler.parser import parse
from evals.problems import load_suite
from run_vocabulary.records import AttemptRecord
from sol_models import search
from nodes.offline.policy import OfflineTier
from nodes.tier_types import ProposingTier, WriterRequest
from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.ir import Span

BUILTIN = {p.name: p for p in load_suite("builtin")}
SMOKE = {p.name: p for p in load_suite("smoke")}


TF32_ONLY = ("f32", "tf32")


def request(problem, history=(), plan=None, diagnostics=(), allowed=None, tolerance=None):
    return WriterRequest(problem_name=problem.name, problem_source=problem.source, sol={"t_sol_us": 10.0},
                         plan=plan, history=list(history), diagnostics=list(diagnostics),
                         attempt_index=len(history) + 1,
                         allowed_precisions=list(allowed if allowed is not None else problem.allowed_precisions),
                         tolerance=tolerance if tolerance is not None else problem.tolerance, problem=problem, gpu="h200")


def tf32_request(problem, history=(), **kw):
    """A request for a problem that allows TF32 but no 16-bit math."""
    return request(problem, history, allowed=TF32_ONLY, **kw)


def attempt(index, text, **fields):
    base = dict(index=index, program_text=text, reached="done", compile_ok=True, correct=True, t_us=100.0,
                timing_source="estimate")
    base.update(fields)
    return AttemptRecord(**base)


@pytest.fixture
def tier(tmp_path):
    return OfflineTier(record=search.ConfigRecord(tmp_path / "record.json"))


def test_first_attempt_is_the_traced_program_with_the_best_estimate(tier):
    problem = BUILTIN["11_linear_relu"]
    assert isinstance(tier, ProposingTier)
    reply = tier.write(tf32_request(problem))
    assert reply.error is None
    assert (reply.tokens_in, reply.tokens_out, reply.cost_usd, reply.model) == (0, 0, 0.0, "offline")
    program, diags = parse(reply.program_text)
    assert program is not None and not diags
    (kernel,) = program.kernels
    best = search.propose_configs(program, "fc", problem, "h200", limit=1)[0]
    assert kernel.config == best
    assert reply.hypothesis.title.startswith("traced program (1 kernel(s), 0 PyTorch step(s))")


def test_hypotheses_follow_the_estimate_and_skip_what_was_tried(tier, tmp_path):
    problem = BUILTIN["01_gemm_square"]
    first = tier.write(request(problem))
    hyps = tier.propose(request(problem, [attempt(1, first.program_text, t_us=400.0)]))
    assert 1 < len(hyps) <= 8
    assert all("over best" in h.title for h in hyps)
    gains = [h.expected_gain for h in hyps]
    assert gains == sorted(gains, reverse=True)
    second = tier.write(request(problem, [attempt(1, first.program_text)], plan=hyps[1]))
    assert second.program_text != first.program_text
    assert hyps[1].title.startswith(second.hypothesis.title)
    # a fresh tier gives the same answers: no hidden state
    other = OfflineTier(record=search.ConfigRecord(tmp_path / "other.json"))
    assert other.write(request(problem)).program_text == first.program_text
    assert [h.title for h in other.propose(request(problem, [attempt(1, first.program_text, t_us=400.0)]))] == \
        [h.title for h in hyps]


def test_check_or_build_errors_unfuse_then_demote_the_named_kernel(tier):
    problem = BUILTIN["11_linear_relu"]
    first = tier.write(tf32_request(problem))
    failed = attempt(1, first.program_text, reached="compile", compile_ok=False, correct=False, t_us=None,
                     failure_reason="compile: build failed", diagnostics=[Diagnostic(code="build", message="kernel 'fc': nvcc failed", span=Span(line=5, column=3))])
    second = tier.write(tf32_request(problem, [failed], diagnostics=failed.diagnostics))
    program, _ = parse(second.program_text)
    assert len(program.kernels) == 1 and [s.fn for s in program.torch_steps] == ["relu"]
    failed2 = attempt(2, second.program_text, reached="compile", compile_ok=False, correct=False, t_us=None,
                      failure_reason="compile: build failed", diagnostics=[Diagnostic(code="build", message="kernel 'fc': nvcc failed")])
    third = tier.write(tf32_request(problem, [failed, failed2]))
    program, _ = parse(third.program_text)
    assert not program.kernels and [s.fn for s in program.torch_steps] == ["linear", "relu"]


def test_wrong_results_move_epilogues_to_pytorch(tier):
    problem = BUILTIN["14_linear_tanh_scale_bias"]
    first = tier.write(tf32_request(problem))
    wrong = attempt(1, first.program_text, reached="compile", correct=False, t_us=None,
                    failure_reason="validate: outputs differ from the reference")
    program, _ = parse(tier.write(tf32_request(problem, [wrong])).program_text)
    assert len(program.kernels) == 1 and len(program.torch_steps) >= 2


def test_measurements_far_from_the_estimate_rerank_the_rest(tier):
    problem = BUILTIN["01_gemm_square"]
    plan, untried, _ = tier._state(request(problem))
    untried = [c for c, _ in untried]
    c0 = plan.candidates[0]
    # the next candidate in estimated order with another tile / schedule than the first
    slow = next(c for c in untried[1:] if (c.configs[0][1].tile, c.configs[0][1].schedule)
                != (c0.configs[0][1].tile, c0.configs[0][1].schedule))
    same_family = [c for c in untried if c is not slow and c.configs[0][1].tile == slow.configs[0][1].tile
                   and c.configs[0][1].schedule == slow.configs[0][1].schedule]
    assert same_family
    history = [attempt(1, c0.program_text, t_us=c0.t_est_us),  # on the estimate
               attempt(2, slow.program_text, t_us=slow.t_est_us * 3)]  # three times slower than estimated
    _, reranked, _ = tier._state(request(problem, history))
    predicted = [t for _, t in reranked]
    assert predicted == sorted(predicted)
    reranked = [c for c, _ in reranked]
    # the planner ranks by expected gain: it must keep the re-ranked order
    gains = [h.expected_gain for h in tier.propose(request(problem, history))]
    assert gains == sorted(gains, reverse=True)
    estimated = [c for c in untried if c.program_text not in (c0.program_text, slow.program_text)]
    assert sorted(c.title for c in reranked) == sorted(c.title for c in estimated)
    position = {c.title: i for i, c in enumerate(reranked)}
    before = {c.title: i for i, c in enumerate(estimated)}
    moved = [c.title for c in same_family]
    assert all(position[t] >= before[t] for t in moved) and any(position[t] > before[t] for t in moved)


def test_gpu_measurements_feed_the_record(tier):
    problem = BUILTIN["05_gemm_transposed_b"]
    first = tier.write(request(problem))
    tier.propose(request(problem, [attempt(1, first.program_text, t_us=120.0, timing_source="estimate")]))
    assert tier.record.entries == {}
    tier.propose(request(problem, [attempt(1, first.program_text, t_us=120.0, timing_source="gpu")]))
    program, _ = parse(first.program_text)
    assert tier.record.best(search.shape_key(program, "matmul")) == (program.kernels[0].config, 120.0)


def test_untraceable_problem_is_the_whole_model_as_one_step_not_a_crash(tier, tmp_path):
    path = tmp_path / "bad.py"
    # a loop over a tensor's value: data-dependent control flow no tracer follows
    path.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        for _ in range(int(x.sum().item()) % 3):\n            x = x * 2\n        return x\n"
                    "def get_inputs():\n    return [torch.rand(4, 4)]\ndef get_init_inputs():\n    return []\n")
    from evals.problems import load_problem

    problem = load_problem(path)
    reply = tier.write(request(problem))
    # never refused: the model runs whole as one PyTorch step (the judge flags it pytorch_only)
    assert reply.error is None and 'module(x0, path=""' in reply.program_text
    assert "1 PyTorch step" in tier.propose(request(problem))[0].title


def test_exhausted_search_says_so(tmp_path):
    problem = SMOKE["01_gemm_tiny"]
    tier = OfflineTier(record=search.ConfigRecord(tmp_path / "r.json"), configs_per_kernel=2)
    history = []
    for i in range(1, 10):
        reply = tier.write(request(problem, history))
        if reply.error:
            assert "exhausted" in reply.error and reply.out_of_ideas
            break
        history.append(attempt(i, reply.program_text))
    else:
        pytest.fail("the search never ended")
    assert tier.propose(request(problem, history)) == []
    assert len({a.program_text for a in history}) == len(history)  # no program twice


def test_a_run_the_offline_tier_runs_out_of_ideas_for_stops_with_that_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(search.RECORD_ENV, str(tmp_path / "record.json"))
    from graph.context import RunContext
    from graph.runner import run_optimize

    problem = SMOKE["01_gemm_tiny"]
    ctx = RunContext(tier="offline", backend="interpreter", max_attempts=40, policy="fixed",
                     tier_impl=OfflineTier(record=search.ConfigRecord(tmp_path / "r.json"), configs_per_kernel=2))
    summary = run_optimize(problem.path, ctx, tmp_path / "run")
    assert 1 < len(summary.attempts) < 40 and summary.stop_reason.startswith("out_of_ideas: the offline tier")
    assert len({a.program_hash for a in summary.attempts}) == len(summary.attempts)
    assert summary.best_index is not None


def test_runs_through_the_graph_with_zero_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv(search.RECORD_ENV, str(tmp_path / "record.json"))
    from graph.context import RunContext
    from graph.runner import run_optimize

    problem = SMOKE["02_linear_relu_tiny"]
    ctx = RunContext(tier="offline", backend="interpreter", max_attempts=1, policy="fixed")
    summary = run_optimize(problem.path, ctx, tmp_path / "run")
    assert summary.tier == "offline" and summary.tokens_in == summary.tokens_out == 0
    (first,) = summary.attempts
    assert first.correct and first.hypothesis.startswith("traced program")


def test_a_config_nvcc_rejects_does_not_unfuse_a_kernel_that_built_before(tier):
    problem = BUILTIN["11_linear_relu"]
    first = tier.write(tf32_request(problem))
    ok = attempt(1, first.program_text)
    second = tier.write(tf32_request(problem, [ok]))
    rejected = attempt(2, second.program_text, reached="compile", compile_ok=False, correct=False, t_us=None,
                       failure_reason="compile: build failed",
                       diagnostics=[Diagnostic(code="build", message="kernel 'fc': nvcc rejected the CUTLASS kernel (tile): ...")])
    third = tier.write(tf32_request(problem, [ok, rejected]))
    program, _ = parse(third.program_text)
    assert not program.torch_steps  # still fused: only the next configuration
    assert third.program_text not in (first.program_text, second.program_text)
