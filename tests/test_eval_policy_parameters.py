"""Policy parameters on `mucutlass eval`: ``--policies sol:eps=2.5,plateau:w=12`` is parsed into stop rules with
their parameters, carried into every run (live or derived by replay) and recorded per run; a live evaluation on the
offline tier stops by them."""

import json
import shutil
from pathlib import Path

import pytest

from evals.executors import LocalExecutor
from evals.runner import EvalConfig, EvalError, check_policies, plan_runs, run_evaluation
from evals.store import ResultsStore
from mucutlass.cli import main
from run_vocabulary.policies import PolicyChoice, PolicyError, PolicySettings, parse_policy

ROOT = Path(__file__).resolve().parent.parent
FAKE = "tests.data.eval.fake_run:run"
SMOKE_GEMM = ROOT / "evals" / "suites" / "smoke" / "01_gemm_tiny.py"


@pytest.mark.parametrize("text, label, changed", [
    ("fixed", "fixed", {}),
    ("sol:eps=2.5", "sol:eps=2.5", {"eps": 2.5}),
    ("plateau:w=12", "plateau:w=12", {"plateau_window": 12}),
    (" sol+plateau : w=8 : eps=1 ", "sol+plateau:eps=1:w=8", {"eps": 1.0, "plateau_window": 8}),
    ("tokens:tokens=200000", "tokens:tokens=200000", {"token_budget": 200000}),
])
def test_a_policy_reads_with_its_parameters(text, label, changed):
    choice = parse_policy(text)
    assert choice.label == label and parse_policy(label) == choice
    base = PolicySettings(max_attempts=7)
    assert choice.settings(base) == PolicySettings(max_attempts=7, **changed)


@pytest.mark.parametrize("text, message", [
    ("forever", "unknown policy 'forever'"),
    ("plateau:eps=1", "the plateau policy takes w, not 'eps'"),
    ("fixed:w=3", "the fixed policy takes no parameters"),
    ("sol:eps", "write a parameter as KEY=VALUE, like sol:eps=2.5"),
    ("sol:eps=wide", "eps must be a number of at least 0"),
    ("sol:eps=inf", "eps must be a number of at least 0"),
    ("plateau:w=0", "w must be a whole number of at least 1"),
    ("plateau:w=2.5", "w must be a whole number of at least 1"),
    ("plateau:w=2:w=3", "w is given twice"),
])
def test_a_policy_written_wrong_says_why_in_one_line(text, message):
    with pytest.raises(PolicyError, match=message) as caught:
        parse_policy(text)
    assert "\n" not in str(caught.value)


def test_the_same_policy_twice_is_refused():
    with pytest.raises(EvalError, match="policy plateau:w=4 is listed twice"):
        check_policies(["plateau:w=4", "plateau : w=4"])


def test_the_command_refuses_a_bad_parameter_with_exit_2(capsys):
    assert main(["eval", "--suite", "smoke", "--policies", "fixed,plateau:w=none", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --policies: 'plateau:w=none': w must be a whole number of at least 1, got 'none'"]


def test_every_run_is_handed_its_policys_parameters(tmp_path):
    config = EvalConfig(source={"suite": "mini"}, problems=["mini/a"], tiers=["offline"], policies_mode="run",
                        policies=check_policies(["sol:eps=0.5", "plateau:w=3", "tokens"]), max_attempts=9)
    specs = {s.policy: s for s in plan_runs(config, {"mini/a": "a.py"}, tmp_path)}
    assert {p: (s.stop_rule, s.eps, s.plateau_window, s.token_budget, s.max_attempts) for p, s in specs.items()} == {
        "sol:eps=0.5": ("sol", 0.5, PolicySettings().plateau_window, PolicySettings().token_budget, 9),
        "plateau:w=3": ("plateau", PolicySettings().eps, 3, PolicySettings().token_budget, 9),
        "tokens": ("tokens", PolicySettings().eps, PolicySettings().plateau_window, PolicySettings().token_budget, 9)}


def test_policies_derived_by_replay_stop_by_their_parameters(tmp_path):
    """The fake's times fall from 67 us towards its t_SOL of 20 us: a wide SOL margin stops at the first result
    that beats the reference, a narrow one never stops within the budget."""
    p = tmp_path / "problems" / "gemm_a.py"
    p.parent.mkdir()
    p.write_text("# problem file\n")
    config = EvalConfig(source={"suite": "mini"}, problems=["mini/gemm_a"], tiers=["offline"], max_attempts=4,
                        policies=check_policies(["fixed", "sol:eps=100", "sol:eps=0.1"]), backend="interpreter")
    run_evaluation(config, {"mini/gemm_a": str(p)}, tmp_path / "ev", executor=LocalExecutor(1), run_fn=FAKE,
                   environment={}, show_progress=False, write_outputs=False)
    store = ResultsStore(tmp_path / "ev" / "results.sqlite")
    try:
        runs = {s.policy: s for s in store.summaries()}
    finally:
        store.close()
    assert len(runs["sol:eps=100"].attempts) == 1 and runs["sol:eps=100"].stop_reason.startswith("sol: ")
    assert len(runs["sol:eps=0.1"].attempts) == 4
    assert runs["sol:eps=100"].policy_settings["eps"] == 100 and runs["sol:eps=0.1"].policy_settings["eps"] == 0.1


def test_a_live_evaluation_stops_by_the_given_plateau_window(tmp_path, capsys):
    """The offline tier on the CPU (the interpreter, estimated times, no reference timed): a plateau window of 2
    ends the run after fewer attempts than the default window of 12, which runs to the budget; the records say so."""
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    shutil.copy(SMOKE_GEMM, level / "1_gemm_tiny.py")
    out = tmp_path / "ev"
    argv = ["eval", "--kernelbench", str(tmp_path / "kb"), "--level", "1", "--tiers", "offline",
            "--policies", "plateau:w=2,plateau", "--policies-mode", "run", "--max-attempts", "6",
            "--backend", "interpreter", "--no-memory", "--no-progress", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    rows = {r["policy"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    short, default = rows["plateau:w=2"], rows["plateau"]
    assert default["attempts"] == 6 and default["stop_reason"].startswith("fixed: 6 of 6")
    assert short["attempts"] < 6 and short["stop_reason"].startswith("plateau: 2 attempts in a row without gain")
    assert short["policy_settings"]["plateau_window"] == 2
    assert default["policy_settings"]["plateau_window"] == PolicySettings().plateau_window
    run_json = json.loads(next((out / "runs").rglob("plateau_w_2/run.json")).read_text())
    assert run_json["settings"]["policy"] == "plateau:w=2" and run_json["settings"]["plateau_window"] == 2
