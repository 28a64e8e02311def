"""The budgeting study script on a synthetic evaluation folder: fixed-policy logs of 12 attempts whose
best comes at attempt 4, replayed over eps x w; the table, the JSON and the plots, checked against
numbers worked out by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import budget_study  # noqa: E402

from evals.executors import LocalExecutor  # noqa: E402
from evals.runner import EvalConfig, run_evaluation  # noqa: E402


def _eval_folder(tmp_path) -> Path:
    paths = {}
    for n in ("gemm_a", "conv_b", "mlp_c"):
        p = tmp_path / "problems" / f"{n}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("# problem\n")
        paths[f"mini/{n}"] = str(p)
    config = EvalConfig(source={"suite": "mini"}, problems=list(paths), tiers=["offline"], policies=["fixed"],
                        max_attempts=12, backend="cutlass")
    out = tmp_path / "ev"
    run_evaluation(config, paths, out, executor=LocalExecutor(1), run_fn="tests.data.eval.fake_run:plateau",
                   environment={}, show_progress=False, write_outputs=False)
    return out


def test_the_study_table_json_and_plots(tmp_path):
    ev = _eval_folder(tmp_path)
    out = tmp_path / "study"
    assert budget_study.main([str(ev), "--out", str(out)]) == 0
    data = json.loads((out / "budget_study.json").read_text())
    rows = {r["setting"]: r for r in data["rows"]}
    assert data["max_attempts"] == 12 and len(rows) == 3 + 3 + 9
    # plateau w=4: the best at attempt 4, then four attempts without gain: 8 of 12 attempts, every run
    w4 = rows["plateau:w=4"]
    assert (w4["attempts_policy"], w4["attempts_fixed"], w4["cut_early"]) == (24, 36, 3)
    assert abs(w4["attempts_saved"] - 1 / 3) < 1e-9
    assert abs(w4["wall_saved"] - 4 / 21) < 1e-9  # 10 s + 11 x 1 s per run, of which the last 4 s are cut
    assert abs(w4["kept"] - 1.0) < 1e-9  # the best is kept
    assert rows["plateau:w=8"]["attempts_policy"] == 36 and rows["plateau:w=12"]["attempts_policy"] == 36
    # t_best / t_SOL = 5 > 1 + eps for every eps of the grid: the SOL rule never fires
    assert all(rows[f"sol:eps={e}"]["attempts_saved"] == 0 for e in ("0.5", "1", "2.5"))
    assert rows["sol+plateau:eps=2.5:w=4"]["attempts_policy"] == 24
    assert rows["sol+plateau:eps=2.5:w=4"]["tokens_saved"] is None  # the offline tier spends no tokens
    md = (out / "budget_study.md").read_text()
    assert "budget is attempts and wall time" in md
    assert "| paper | - | sol+plateau:eps=2.5:w=12 |" in md and "43.0%" in md and "96.0%" in md
    assert "At the paper's point (offline, dsl+sol): 0.0% of the attempts" in md
    for png in ("budget_tradeoff.png", "budget_grid.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"![{png}]({png})" in md


def test_a_missing_folder_is_one_clear_line(tmp_path, capsys):
    assert budget_study.main([str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
