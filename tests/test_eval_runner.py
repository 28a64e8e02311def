"""The evaluation runner with a fake run function (tests/data/eval/fake_run.py): store contents,
policies derived by replay, resume after a kill, failures, several local workers, the CLI."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from evals.executors import LocalExecutor
from evals.runner import EvalConfig, EvalError, run_evaluation
from evals.store import ResultsStore
from mucutlass.cli import main

ROOT = Path(__file__).resolve().parent.parent
FAKE = "tests.data.eval.fake_run:run"


def _problems(tmp_path, names=("gemm_a", "conv_b", "mlp_c")):
    paths = {}
    for n in names:
        p = tmp_path / "problems" / f"{n}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("# problem file\n")
        paths[f"mini/{n}"] = str(p)
    return paths


def _config(paths, **kw):
    base = dict(source={"suite": "mini"}, problems=list(paths), tiers=["offline"], policies=["fixed", "sol+plateau"],
                max_attempts=4, backend="interpreter")
    base.update(kw)
    return EvalConfig(**base)


def test_evaluation_stores_runs_and_derives_policies(tmp_path, monkeypatch):
    log = tmp_path / "executed.txt"
    monkeypatch.setenv("FAKE_RUN_EXECUTED_LOG", str(log))
    paths = _problems(tmp_path)
    out = tmp_path / "ev"
    outcome = run_evaluation(_config(paths), paths, out, executor=LocalExecutor(1), run_fn=FAKE,
                             environment={"gpu": "none"}, show_progress=False)
    assert (outcome.ran, outcome.skipped, outcome.derived, outcome.failed) == (3, 0, 3, {})
    store = ResultsStore.open_existing(out)
    status = store.run_status()
    assert Counter(status.values()) == {"done": 3, "derived": 3}
    assert store.derived_policies() == {"sol+plateau": "fixed"}
    # each problem ran once, under fixed only; the derived runs are cuts of the same log
    assert len(log.read_text().splitlines()) == 3 * 4
    for s in store.summaries():
        assert s.problem in paths and s.tier == "offline"
        if s.policy == "sol+plateau":
            assert 1 <= len(s.attempts) <= 4
    doc = json.loads((out / "results.json").read_text())
    assert {"date", "gpu", "versions", "rows", "summary"} <= set(doc)
    assert doc["summary"]["policy"] == "fixed" and doc["summary"]["total"] == 3
    for key in ("geomean_speedup_vs_eager_fp32", "geomean_speedup_vs_eager_tf32", "geomean_speedup_vs_compile",
                "geomean_sol_fraction", "correct", "total"):
        assert key in doc["summary"]
    assert len(doc["rows"]) == 6
    assert (out / "report" / "report.md").is_file()

    # a second call finds everything finished and runs nothing
    again = run_evaluation(_config(paths), paths, out, executor=LocalExecutor(1), run_fn=FAKE,
                           environment={}, show_progress=False, write_outputs=False)
    assert (again.resumed, again.ran, again.skipped) == (True, 0, 3)
    assert len(log.read_text().splitlines()) == 12


def test_policies_mode_run_runs_each_policy(tmp_path):
    paths = _problems(tmp_path, ("gemm_a",))
    out = tmp_path / "ev"
    outcome = run_evaluation(_config(paths, policies_mode="run"), paths, out, executor=LocalExecutor(1),
                             run_fn=FAKE, environment={}, show_progress=False, write_outputs=False)
    assert (outcome.ran, outcome.derived) == (2, 0)
    assert set(ResultsStore.open_existing(out).run_status().values()) == {"done"}


def test_a_failing_run_costs_that_run_only_and_is_retried(tmp_path):
    paths = _problems(tmp_path)
    out = tmp_path / "ev"
    outcome = run_evaluation(_config(paths), paths, out, executor=LocalExecutor(1),
                             run_fn="tests.data.eval.fake_run:broken", environment={}, show_progress=False,
                             write_outputs=False)
    assert list(outcome.failed.values()) == ["RuntimeError: boom in the graph"]
    assert outcome.derived == 2
    retry = run_evaluation(_config(paths), paths, out, executor=LocalExecutor(1), run_fn=FAKE,
                           environment={}, show_progress=False, write_outputs=False)
    assert (retry.ran, retry.failed) == (1, {})


_EVAL_SCRIPT = """
import json, sys
from evals.executors import LocalExecutor
from evals.runner import EvalConfig, run_evaluation
paths, out = json.loads(sys.argv[1]), sys.argv[2]
config = EvalConfig(source={"suite": "mini"}, problems=list(paths), tiers=["offline"], policies=["fixed", "sol"],
                    max_attempts=4, backend="interpreter")
o = run_evaluation(config, paths, out, executor=LocalExecutor(1), run_fn="%s", environment={},
                   show_progress=False, write_outputs=False)
print(o.model_dump_json())
""" % FAKE


def test_resume_after_kill_redoes_nothing(tmp_path):
    """Kill the evaluation process mid-run; the restart skips finished runs and continues the
    killed run from its checkpoint, so every attempt is executed exactly once."""
    log = tmp_path / "executed.txt"
    out = tmp_path / "ev"
    paths = _problems(tmp_path, ("p1", "p2", "p3", "p4", "p5"))
    cmd = [sys.executable, "-c", _EVAL_SCRIPT, json.dumps(paths), str(out)]
    env = {**os.environ, "FAKE_RUN_EXECUTED_LOG": str(log), "FAKE_RUN_DIE_AFTER": "10"}
    killed = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == 137
    store = ResultsStore.open_existing(out)
    assert len(store.finished_keys()) == 2  # 2 runs x 4 attempts done; the third died after 2 attempts
    partial = [k for k, s in store.run_status().items() if s == "running"]
    assert len(partial) == 1 and len(store.attempts(*partial[0])) == 2  # streamed before the kill
    store.close()

    env.pop("FAKE_RUN_DIE_AFTER")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert (outcome["resumed"], outcome["ran"], outcome["skipped"]) == (True, 3, 2)
    executed = log.read_text().splitlines()
    assert len(executed) == 5 * 4 and len(set(executed)) == 5 * 4
    store = ResultsStore.open_existing(out)
    assert Counter(store.run_status().values()) == {"done": 5, "derived": 5}
    assert all(len(s.attempts) == 4 for s in store.summaries(statuses=("done",)))


def test_two_local_workers(tmp_path):
    paths = _problems(tmp_path)
    out = tmp_path / "ev"
    outcome = run_evaluation(_config(paths), paths, out, executor=LocalExecutor(2), run_fn=FAKE,
                             environment={}, show_progress=False, write_outputs=False)
    assert (outcome.ran, outcome.failed) == (3, {})
    store = ResultsStore.open_existing(out)
    assert len(store.finished_keys()) == 6
    assert all(len(s.attempts) == 4 for s in store.summaries(statuses=("done",)))


def test_cli_rejects_bad_input_with_a_message(tmp_path, capsys):
    assert main(["eval", "--suite", "smoke", "--policies", "fixed,bogus", "--out", str(tmp_path / "x")]) == 2
    assert "unknown policy 'bogus'" in capsys.readouterr().err
    assert main(["eval", "--suite", "nosuch", "--out", str(tmp_path / "x")]) == 1
    assert "unknown suite 'nosuch'" in capsys.readouterr().err
    assert main(["eval", "--suite", "smoke", "--level", "1"]) == 1
    assert "--level and --ids go with --kernelbench" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "missing")]) == 1
    assert "no such results store" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 1
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(tmp_path), "--eps", "a,b"])
    assert exc.value.code == 2


def test_unknown_policy_in_config_is_an_error(tmp_path):
    paths = _problems(tmp_path, ("gemm_a",))
    with pytest.raises(EvalError, match="unknown policy"):
        run_evaluation(_config(paths, policies=["fixd"]), paths, tmp_path / "ev", executor=LocalExecutor(1),
                       run_fn=FAKE, environment={}, show_progress=False)


def test_eval_command_end_to_end(tmp_path, capsys):
    out = tmp_path / "ev"
    argv = ["eval", "--suite", "smoke", "--tiers", "offline", "--policies", "fixed,sol+plateau", "--max-attempts", "2",
            "--backend", "interpreter", "--out", str(out), "--run-fn", FAKE, "--no-progress"]
    assert main(argv) == 0
    assert "started evaluation" in capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["source"] == {"suite": "smoke"} and doc["config"]["max_attempts"] == 2
    assert doc["summary"]["total"] == 5 and doc["environment"]["backend"] == "interpreter"
    assert {(r["policy"], r["attempts"]) for r in doc["rows"] if r["policy"] == "fixed"} == {("fixed", 2)}
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "resumed evaluation" in printed and "0 run(s) now, 5 already finished" in printed


def test_the_mucutlass_command_hands_the_runner_the_graphs_run_function():
    from mucutlass.cli import build_parser

    args = build_parser().parse_args(["eval", "--suite", "smoke"])
    assert args.run_fn == "graph.runner:run_spec"
    from evals.runner import resolve_run_fn
    from graph.runner import run_spec

    assert resolve_run_fn(args.run_fn) is run_spec
