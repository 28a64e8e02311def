"""The variant axis: what each variant turns on in the prompt, the planner and the stop rule; the
variant recorded in runs, stores (old stores migrated) and tables."""

from __future__ import annotations

import json
import sqlite3

import pytest

from evals.store import ResultsStore
from run_vocabulary.variants import VariantError, check_variants, get_variant, stop_policy
from graph.context import RunContext
from run_vocabulary.problem import STRICT_PRECISIONS
from run_vocabulary.records import AttemptRecord, RunSummary
from test_graph_fakes import GOOD, SLOW, WRONG
from test_graph_loop import chat_tier, run

SOL_MARKERS = ("Speed of light", "t_SOL", "x SOL", "SOL =", "-bound")


def _sub(tmp_path, name):
    path = tmp_path / name
    path.mkdir()
    return path


def test_variant_names_and_stop_rules():
    assert [get_variant(n).language for n in ("dsl+sol", "dsl", "cuda", "cuda+sol")] == ["mcu", "mcu", "python", "python"]
    assert stop_policy("sol+plateau", "dsl") == "plateau" and stop_policy("sol", "cuda") == "fixed"
    assert stop_policy("sol+plateau", "dsl+sol") == "sol+plateau" and stop_policy("tokens", "dsl") == "tokens"
    with pytest.raises(VariantError, match="unknown variant 'cude'"):
        check_variants(["cuda", "cude"])
    with pytest.raises(VariantError, match="twice"):
        check_variants(["dsl", "dsl"])
    with pytest.raises(ValueError, match="unknown variant"):
        RunContext(variant="triton")


def test_dsl_prompt_has_no_sol_report_and_dsl_sol_has_it(tmp_path):
    tier, chat = chat_tier(WRONG, SLOW, GOOD)
    summary, _, _ = run(_sub(tmp_path, "a"), tier, max_attempts=3, variant="dsl")
    assert summary.variant == "dsl" and summary.best_index == 3
    for system, user in chat.seen:
        assert "```mcu" in system  # the same language reference as dsl+sol
        assert not [m for m in SOL_MARKERS if m in user], user
    # the flat loop: no ROI plan; the planner asks for a first correct program, then a faster one
    assert [a.hypothesis for a in summary.attempts] == ["a first correct program", "repair: a first correct program",
                                                        "a faster program"]
    tier, chat = chat_tier(WRONG, SLOW, GOOD)
    run(_sub(tmp_path, "b"), tier, max_attempts=3, variant="dsl+sol")
    assert all("# Speed of light" in user and "t_SOL = 10 us" in user for _, user in chat.seen)
    assert "x SOL" in chat.seen[-1][1]


def test_dsl_variant_never_stops_on_sol(tmp_path):
    # dsl+sol stops after GOOD (12 us <= 1.5 x 10 us); dsl has no SOL stop and runs to its budget
    tier, _ = chat_tier(SLOW, GOOD, GOOD, GOOD)
    guided, _, _ = run(_sub(tmp_path, "a"), tier, policy="sol", max_attempts=4, eps=0.5)
    assert len(guided.attempts) == 2 and guided.stop_reason.startswith("sol:")
    tier, _ = chat_tier(SLOW, GOOD, GOOD, GOOD)
    flat, _, _ = run(_sub(tmp_path, "b"), tier, policy="sol", max_attempts=4, eps=0.5, variant="dsl")
    assert len(flat.attempts) == 4 and flat.stop_reason.startswith("fixed: 4 of 4")
    assert json.loads((tmp_path / "b" / "run" / "run.json").read_text())["settings"]["variant"] == "dsl"
    assert json.loads((tmp_path / "b" / "run" / "summary.json").read_text())["variant"] == "dsl"


def test_offline_tier_cannot_write_the_cuda_variant(tmp_path):
    from nodes.offline.policy import OfflineTier

    summary, _, _ = run(tmp_path, OfflineTier(), max_attempts=2, variant="cuda")
    assert summary.attempts == [] and summary.stop_reason.startswith("setup failed: the fake tier cannot write")


def _old_store(path):
    """A results store as written before variants: no variant column, (problem, tier, policy) keys."""
    db = sqlite3.connect(path)
    fields = list(AttemptRecord.model_fields)
    db.executescript(f"""
        CREATE TABLE evaluation (id INTEGER PRIMARY KEY CHECK (id = 1), config_json TEXT NOT NULL,
          environment_json TEXT NOT NULL, created_at REAL NOT NULL, resumed_at REAL);
        CREATE TABLE runs (problem TEXT NOT NULL, tier TEXT NOT NULL, policy TEXT NOT NULL, status TEXT NOT NULL,
          run_dir TEXT, derived_from TEXT, error TEXT, summary_json TEXT, started_at REAL, finished_at REAL,
          PRIMARY KEY (problem, tier, policy));
        CREATE TABLE attempts (problem TEXT NOT NULL, tier TEXT NOT NULL, policy TEXT NOT NULL,
          {", ".join(f'"{n}"' for n in fields)}, PRIMARY KEY (problem, tier, policy, "index"));
    """)
    config = {"problems": ["p"], "tiers": ["offline"], "policies": ["fixed"], "policies_mode": "replay",
              "max_attempts": 2}
    db.execute("INSERT INTO evaluation VALUES (1, ?, '{}', 0, NULL)", (json.dumps(config),))
    summary = RunSummary(problem="p", tier="offline", policy="fixed", backend="interpreter", gpu="h200")
    db.execute("INSERT INTO runs (problem, tier, policy, status, summary_json) VALUES ('p', 'offline', 'fixed', 'done', ?)",
               (summary.model_dump_json(exclude={"attempts"}),))
    row = AttemptRecord(index=1, hypothesis="tf32 math", correct=True, t_us=12.5).model_dump()
    values = [json.dumps(v) if isinstance(v, list) else v for v in row.values()]
    db.execute(f"INSERT INTO attempts VALUES ('p', 'offline', 'fixed', {', '.join('?' * len(values))})", values)
    db.commit()
    db.close()
    return config


def test_old_store_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "results.sqlite"
    config = _old_store(path)
    store = ResultsStore(path)
    cols = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(runs)")}
    assert "variant" in cols
    assert store.finished_keys() == {("p", "offline", "fixed", "dsl+sol")}
    [summary] = store.summaries()
    assert summary.variant == "dsl+sol" and [a.t_us for a in summary.attempts] == [12.5]
    # the old evaluation resumes under the new config (its variants were the default) ...
    assert store.init_evaluation({**config, "variants": ["dsl+sol"]}, {}, resume_keys=tuple(config) + ("variants",))
    # ... and a second variant of the same run is a separate row
    store.finish_run(summary.model_copy(update={"variant": "dsl"}))
    assert store.finished_keys() == {("p", "offline", "fixed", "dsl+sol"), ("p", "offline", "fixed", "dsl")}
    store.close()
    assert ResultsStore(path).finished_keys() == {("p", "offline", "fixed", "dsl+sol"), ("p", "offline", "fixed", "dsl")}


def test_eval_cli_rejects_an_unknown_variant(tmp_path, capsys):
    from mucutlass.cli import main

    assert main(["eval", "--suite", "smoke", "--variants", "cuda,fortran", "--out", str(tmp_path / "e")]) == 1
    assert "unknown variant 'fortran'" in capsys.readouterr().err


def test_cuda_sol_plans_by_roi_against_the_gap():
    from graph.planning import nominate_source, plan, ProgramFeatures

    sol = {"t_sol_us": 10.0, "bound": "compute"}
    far = [AttemptRecord(index=1, correct=True, t_us=100.0, reached="done")]  # 10x from SOL: the bold change
    near = [AttemptRecord(index=1, correct=True, t_us=15.0, reached="done")]  # 1.5x: the safe one
    titles = lambda hist: [h.title for h in plan(sol, hist, ProgramFeatures(), STRICT_PRECISIONS, proposed=nominate_source(sol, hist))]
    assert titles(far) == ["restructure the kernel", "tune the kernel"]
    assert titles(near) == ["tune the kernel", "restructure the kernel"]
    assert "10.0x from the speed of light (compute-bound)" in nominate_source(sol, far)[0].rationale
    assert [h.title for h in nominate_source(sol, [])] == ["a first correct program"]
