"""`mucutlass eval --suite smoke --tiers T --variants cuda,dsl,dsl+sol` end to end against a mock
OpenAI-compatible endpoint on 127.0.0.1: the real graph, prompts, harness (on the CPU) and store; the
report carries the variants table. The mock answers like a model would: a broken first attempt,
then a program (μCUTLASS for the dsl variants, a ModelNew module for cuda) for the problem it is shown."""

from __future__ import annotations

import json
import re

import pytest

from evals.problems import load_suite
from evals.store import ResultsStore
from mock_servers import MockOpenAI
from mucutlass.cli import main
from nodes.offline.policy import OfflineTier
from nodes.tier_types import WriterRequest

SMOKE = load_suite("smoke")[:2]  # a GEMM and a Linear + ReLU: enough for two problems per variant


class ModelReplies:
    """The mock server's replies, chosen from the request each one answers (the server indexes its
    list by request number)."""

    def __init__(self, server: MockOpenAI):
        self.server = server

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> str:
        messages = self.server.requests[i]["body"]["messages"]
        system, user = messages[0]["content"], messages[-1]["content"]
        problem = next(p for p in SMOKE if p.source.strip() in user)
        first = "# Attempt 1:" in user
        if "load_inline" in system:  # the cuda variant's prompt: answer with a ModelNew module
            if first:
                return "```python\nclass ModelNew(nn.Module:\n    pass\n```"
            module = re.sub(r"\bclass Model\(", "class ModelNew(", problem.source)
            return f"Keeping PyTorch's layers for now.\n```python\n{module}```"
        if first:
            return "```mcu\nkernel k = gemm(x, w) {\n```"
        request = WriterRequest(problem_name=problem.name, problem_source=problem.source, sol={}, plan=None,
                                history=[], diagnostics=[], attempt_index=1, problem=problem,
                                allowed_precisions=list(problem.allowed_precisions), tolerance=problem.tolerance)
        return f"A TF32 kernel.\n```mcu\n{OfflineTier().write(request).program_text}```"


@pytest.fixture()
def mock_tier(tmp_path, monkeypatch):
    with MockOpenAI([], usage=(2000, 500)) as server:
        server.replies = ModelReplies(server)
        tiers = tmp_path / "tiers.toml"
        tiers.write_text(f'[tiers.mock]\nmodel = "mock-model"\nbase_url = "{server.url}/v1"\napi_key_env = "MOCK_KEY"\n'
                         "price_in_per_mtok = 1.0\nprice_out_per_mtok = 4.0\nmax_retries = 0\ntimeout_s = 30\n")
        monkeypatch.setenv("MUCUTLASS_TIERS", str(tiers))
        monkeypatch.setenv("MOCK_KEY", "sk-test")
        monkeypatch.setenv("MUCUTLASS_CUDA_EXT_DIR", str(tmp_path / "ext"))
        yield server


def test_eval_variants_end_to_end_against_a_mock_endpoint(tmp_path, mock_tier, capsys, monkeypatch):
    import evals.problems

    # the smoke suite's first two problems (the CLI takes whole suites)
    monkeypatch.setattr(evals.problems, "load_suite",
                        lambda name, *rest, _all=evals.problems.load_suite: _all(name, *rest)[:2])
    out = tmp_path / "ev"
    argv = ["eval", "--suite", "smoke", "--tiers", "mock", "--variants", "cuda,dsl,dsl+sol", "--policies", "fixed",
            "--max-attempts", "2", "--backend", "interpreter", "--out", str(out), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    store = ResultsStore.open_existing(out)
    runs = store.summaries()
    assert sorted((s.problem, s.variant) for s in runs) == sorted(
        (p.key, v) for p in SMOKE for v in ("cuda", "dsl", "dsl+sol"))
    for s in runs:
        first, second = s.attempts
        assert s.tier == "mock" and (s.tokens_in, s.tokens_out) == (4000, 1000)
        assert first.failure_reason.startswith("build: ") if s.variant == "cuda" else first.failure_reason.startswith("check:")
        assert second.correct, (s.problem, s.variant, second.failure_reason)
        if s.variant == "cuda":  # layers kept as PyTorch's: correct, and flagged as PyTorch-only
            assert any(f.startswith("pytorch_only") for f in second.flags)
    # the prompts of each variant: SOL only in dsl+sol; the compile errors went back to the model
    users = [r["body"]["messages"][-1]["content"] for r in mock_tier.requests]
    systems = [r["body"]["messages"][0]["content"] for r in mock_tier.requests]
    assert sum("# Speed of light" in u for u in users) == 2 * len(SMOKE)  # both attempts of the dsl+sol runs
    assert sum("load_inline" in s for s in systems) == 2 * len(SMOKE)
    assert any("error[syntax]" in u for u in users)
    # the report's variants table: rows tiers, columns variants, a cell per variant
    report = (out / "report" / "report.md").read_text()
    table = report.split("## Agent variants", 1)[1]
    assert "| tier | dsl+sol | dsl | cuda |" in table
    row = next(line for line in table.splitlines() if line.startswith("| mock |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    # no GPU: no reference times, so no speedups ("-"); two attempts of 2,500 tokens at $1 / $4 per million
    assert cells[0] == "- / -; 2/2 correct; 5.0k tok, $0.008 per problem" and cells[1] == cells[0]
    assert cells[2].endswith("0/2 correct; 5.0k tok, $0.008 per problem")  # PyTorch-only is not counted
    assert "2.0 (median 2; 2/2 runs)" in table and "none correct (0/2)" in table
    doc = json.loads((out / "results.json").read_text())
    assert {(c["variant"], c["correct"]) for c in doc["variants"]} == {("dsl+sol", 2), ("dsl", 2), ("cuda", 0)}
    assert {r["variant"] for r in doc["rows"]} == {"cuda", "dsl", "dsl+sol"}
    # replay shows the variant column too
    assert main(["replay", str(out), "--policies", "plateau", "--w", "4"]) == 0
    assert "| mock | dsl | plateau:w=4 |" in capsys.readouterr().out
