"""Model tiers: the TOML file, reading a program out of a reply, and ChatOpenAI against a mock
OpenAI server on 127.0.0.1, in the graph end to end (dead endpoints and malformed replies included)."""

from __future__ import annotations

import socket

import pytest

from graph.context import RunContext
from graph.runner import run_optimize
from mock_servers import MockOpenAI
from nodes import prompts
from nodes.tiers import ChatTier, TierError, TierSpec, WriterRequest, chat_openai, extract_program, load_tiers, make_tier
from test_graph_fakes import BROKEN, GOOD, SLOW, TextTrackingServices, write_problem
from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program
from dsl_compiler.ir import Span


def test_builtin_tiers_file():
    tiers = load_tiers()
    assert tiers["offline"].kind == "offline"
    t = tiers["gpt-5-mini"]
    assert t.base_url and t.api_key_env == "OPENAI_API_KEY" and t.price_out_per_mtok > t.price_in_per_mtok
    assert abs(t.cost_usd(1_000_000, 1_000_000) - (t.price_in_per_mtok + t.price_out_per_mtok)) < 1e-12


def test_user_tiers_override_and_errors(tmp_path, monkeypatch):
    user = tmp_path / "tiers.toml"
    user.write_text('[tiers.gpt-5-mini]\nmodel = "other"\nbase_url = "http://127.0.0.1:1/v1"\n'
                    '[tiers.mine]\nmodel = "m"\nprice_in_per_mtok = 2.0\n')
    tiers = load_tiers(user)
    assert tiers["gpt-5-mini"].model == "other" and tiers["mine"].price_in_per_mtok == 2.0
    monkeypatch.setenv("MUCUTLASS_TIERS", str(user))
    assert load_tiers()["mine"].model == "m"
    monkeypatch.delenv("MUCUTLASS_TIERS")
    bad = tmp_path / "bad.toml"
    bad.write_text("[tiers.x\n")
    with pytest.raises(TierError, match="not valid TOML"):
        load_tiers(bad)
    bad.write_text('[tiers.x]\nprice_in_per_mtok = "cheap"\n')
    with pytest.raises(TierError, match=r"tiers\.x\.price_in_per_mtok"):
        load_tiers(bad)
    with pytest.raises(TierError, match="tiers file not found"):
        load_tiers(tmp_path / "missing.toml")
    with pytest.raises(TierError, match="unknown tier 'nope'"):
        make_tier("nope")


def test_missing_api_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(TierError, match="OPENAI_API_KEY"):
        make_tier("gpt-5-mini")


@pytest.mark.parametrize("reply, expected", [
    ("Plan.\n```mcu\nkernel a = gemm(x, w) { store y: f32 = acc }\n```\nDone.", "kernel a = gemm(x, w) { store y: f32 = acc }\n"),
    ("```python\nprint(1)\n```\n```mucutlass\ninput x: f32[2]\n```", "input x: f32[2]\n"),
    ("```\ninput x: f32[2]\noutput x\n```", "input x: f32[2]\noutput x\n"),
    ("input x: f32[2]\noutput x", "input x: f32[2]\noutput x\n"),
    ("```mcu\ninput x: f32[2]\noutput x", "input x: f32[2]\noutput x\n"),  # unterminated fence (a cut-off reply)
])
def test_extract_program(reply, expected):
    assert extract_program(reply) == (expected, None)


@pytest.mark.parametrize("reply, message", [
    ("", "empty"), ("I cannot do that.", "no program"), ("```a\nx\n```\n```b\ny\n```", "none tagged mcu"),
])
def test_extract_program_failures(reply, message):
    text, error = extract_program(reply)
    assert text is None and message in error


def test_writer_prompt_carries_the_language_reference(tmp_path, monkeypatch):
    doc = tmp_path / "language.md"
    doc.write_text("# μCUTLASS reference\nUNIQUE-MARKER-123\n")
    monkeypatch.setattr(prompts, "LANGUAGE_DOC", doc)
    system = prompts.WRITER_SYSTEM.format(language_reference=prompts.language_reference(doc))
    assert "UNIQUE-MARKER-123" in system and "exactly one complete program in a single ```mcu" in system
    req = WriterRequest(problem_name="p", problem_source="class Model: ...", sol={"t_sol_us": 12.5, "bound": "compute"},
                        plan=None, history=[], diagnostics=[Diagnostic(code="x", message="bad", span=Span(line=3, column=1))], attempt_index=2,
                        best_program=parse(GOOD)[0])
    user = prompts.writer_user_prompt(req)
    assert "t_SOL = 12.5 us (compute-bound" in user and "program.mcu:3:1: error[x]: bad" in user
    # the best program is shown in its canonical text
    assert "# The best program so far: edit it\n```mcu\n" + format_program(parse(GOOD)[0]).strip() + "\n```" in user


def openai_ctx(url, tmp_path, max_attempts=3, **spec):
    spec = TierSpec(name="mock", model="mock-model", base_url=f"{url}/v1", api_key_env="MOCK_KEY",
                    price_in_per_mtok=0.5, price_out_per_mtok=2.0, max_retries=0, timeout_s=5, **spec)
    return RunContext(tier="mock", policy="fixed", max_attempts=max_attempts, tier_impl=ChatTier(chat_openai(spec), spec),
                      services=TextTrackingServices())


def test_chat_openai_against_a_mock_server(tmp_path, monkeypatch):
    monkeypatch.setenv("MOCK_KEY", "sk-test")
    replies = [f"```mcu\n{BROKEN}```", f"Slow first.\n```mcu\n{SLOW}```", {"status": 500}, {"raw": b"{not json"},
               f"```mcu\n{GOOD}```"]
    with MockOpenAI(replies, usage=(1200, 300)) as server:
        summary = run_optimize(write_problem(tmp_path), openai_ctx(server.url, tmp_path, max_attempts=5), tmp_path / "r")
    reasons = [a.failure_reason or "" for a in summary.attempts]
    assert reasons[0].startswith("check:") and reasons[1] == ""
    assert reasons[2].startswith("write: model call failed") and reasons[3].startswith("write: model call failed")
    assert summary.best_index == 5 and summary.best_t_us == 12.0
    # usage from the three answered calls only, at the tier's prices
    assert (summary.tokens_in, summary.tokens_out) == (3 * 1200, 3 * 300)
    assert abs(summary.cost_usd - (3600 * 0.5 + 900 * 2.0) / 1e6) < 1e-12
    assert summary.tokens_by_model["mock-model"]["tokens_in"] == 3600
    first = server.requests[0]
    assert first["auth"] == "Bearer sk-test" and first["body"]["model"] == "mock-model"
    assert first["body"]["messages"][0]["role"] == "system" and "```mcu" in first["body"]["messages"][0]["content"]
    # the check error went back to the writer
    assert "error[undefined-name]" in server.requests[1]["body"]["messages"][1]["content"]


def test_dead_endpoint_is_a_failed_attempt_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("MOCK_KEY", "sk-test")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    summary = run_optimize(write_problem(tmp_path), openai_ctx(f"http://127.0.0.1:{port}", tmp_path, max_attempts=2),
                           tmp_path / "r")
    assert len(summary.attempts) == 2 and summary.best_index is None
    assert all(a.failure_reason.startswith("write: model call failed: OpenAIConnectionError: Connection error") for a in summary.attempts)
    assert summary.stop_reason.startswith("fixed")


def test_writer_system_prompt_includes_the_shipped_language_reference():
    doc = prompts.LANGUAGE_DOC
    assert doc.is_file(), "docs/language.md ships with the package"
    assert doc.read_text() in prompts.writer_system_prompt()
