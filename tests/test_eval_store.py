"""The results store: every attempt field round-trips, runs resume by key, mismatched stores refuse."""

import sqlite3

import pytest

from evals.store import ResultsStore, StoreError
from run_vocabulary.records import AttemptRecord, RunSummary


def _attempt(i, **kw):
    base = dict(index=i, hypothesis="tile 128x256", program_text="kernel k = gemm(x, w^T) {}", program_hash=f"h{i}",
                reached="done", compile_ok=True, diagnostics=["<program>:1:2: error[tile]: bad"], correct=True,
                max_abs_error=1e-3, t_us=12.5, t_spread_pct=1.5, timing_source="gpu", t_sol_us=10.0,
                sol_fraction=0.8, speedup_vs_eager_fp32=5.0, speedup_vs_eager_tf32=1.2, speedup_vs_compile=1.1,
                precision="tf32", flags=["sol_ceiling: x"], tokens_in=100, tokens_out=20, cost_usd=0.01,
                build_s=21.0, wall_s=30.0, improved=True)
    base.update(kw)
    return AttemptRecord(**base)


def test_attempts_stored_with_rendered_diagnostics_read_back_as_values():
    """Records stored before diagnostics travelled as values hold them rendered: they read back field by field."""
    row = _attempt(1).model_dump(mode="json")
    row["diagnostics"] = ["program.mcu:3:7: error[tile]: bad tile\n  found:    7\n  hint:     use 64",
                          "build crashed: OSError: disk full"]
    tile, crashed = AttemptRecord.model_validate(row).diagnostics
    assert (tile.code, tile.message, tile.span.line, tile.span.column, tile.found, tile.hint) == \
        ("tile", "bad tile", 3, 7, "7", "use 64")
    assert tile.render("program.mcu") == row["diagnostics"][0]
    assert crashed.span is None and crashed.message == "build crashed: OSError: disk full"


def test_attempts_round_trip_every_field(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.init_evaluation({"problems": ["p"]}, {"gpu": "H200"})
    a = _attempt(1)
    store.record_attempt("p", "offline", "fixed", a)
    assert store.attempts("p", "offline", "fixed") == [a]
    # the same index again replaces it (a restarted run re-reporting an attempt)
    b = _attempt(1, t_us=11.0, flags=[])
    store.record_attempt("p", "offline", "fixed", b)
    assert store.attempts("p", "offline", "fixed") == [b]
    cols = {r[1] for r in sqlite3.connect(tmp_path / "r.sqlite").execute("PRAGMA table_info(attempts)")}
    assert set(AttemptRecord.model_fields) <= cols


def test_runs_finish_fail_and_resume_keys(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    assert store.init_evaluation({"problems": ["p", "q"], "max_attempts": 4}, {"gpu": "H200"},
                                 resume_keys=("problems", "max_attempts")) is False
    store.start_run("p", "offline", "fixed", run_dir="/x")
    store.record_attempt("p", "offline", "fixed", _attempt(1))
    store.start_run("q", "offline", "fixed")
    store.fail_run("q", "offline", "fixed", "RuntimeError: boom")
    assert store.finished_keys() == set()
    summary = RunSummary(problem="p", tier="offline", policy="fixed", backend="cutlass", gpu="h200",
                         attempts=[_attempt(1), _attempt(2, correct=False)], best_index=1)
    store.finish_run(summary)
    assert store.finished_keys() == {("p", "offline", "fixed", "dsl+sol")}
    assert store.failures() == {("q", "offline", "fixed", "dsl+sol"): "RuntimeError: boom"}
    store.close()

    again = ResultsStore(path)
    assert again.init_evaluation({"problems": ["p", "q"], "max_attempts": 4, "executor": "ray"}, {},
                                 resume_keys=("problems", "max_attempts")) is True
    [loaded] = again.summaries()
    assert loaded == summary
    with pytest.raises(StoreError, match="max_attempts=4, not 8"):
        again.init_evaluation({"problems": ["p", "q"], "max_attempts": 8}, {}, resume_keys=("max_attempts",))


def test_open_existing_explains_what_is_wrong(tmp_path):
    with pytest.raises(StoreError, match="no such results store"):
        ResultsStore.open_existing(tmp_path)
    (tmp_path / "results.sqlite").write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a results store"):
        ResultsStore.open_existing(tmp_path)


def test_another_programs_sqlite_file_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "results.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (x)")
    db.execute("INSERT INTO notes VALUES ('kept')")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a mucutlass results store .it holds notes.; nothing was written"):
        ResultsStore(path)  # as `eval --out` opens it
    with pytest.raises(StoreError, match="not a mucutlass results store"):
        ResultsStore.open_existing(tmp_path)  # as `replay` and `report` open it
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]
    ResultsStore(tmp_path / "fresh.sqlite").close()
    ResultsStore(tmp_path / "fresh.sqlite").close()  # a store of ours opens again
