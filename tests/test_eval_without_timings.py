"""What an evaluation without timings (no GPU) shows: plots that say why they are empty, replay tables whose dashes
are explained, and log-scale labels that never overlap."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from PIL import Image

from evals import metrics
from run_vocabulary.records import RunSummary
from evals.replay import policy_grid, replay, replay_table_markdown
from evals.report import (_figure, _plain_log_y, _pyplot, plot_attempt_curves, plot_fast_p, plot_spend_vs_speedup,
                          plot_speedup_vs_sol)


def _result(problem: str, speedups: dict[str, float], correct: bool = True) -> metrics.ProblemResult:
    return metrics.ProblemResult(problem=problem, tier="offline", policy="fixed", correct=correct, speedups=speedups,
                                 sol_fraction=0.2, attempts=2,
                                 attempt_speedups={b: [v, v] for b, v in speedups.items()})


def _plots(results, tmp_path):
    groups = metrics.by_group(results)
    group_metrics = {k: metrics.group_metrics(v) for k, v in groups.items()}
    return [plot_fast_p(groups, "eager_tf32", tmp_path / "fast_p.png"),
            plot_speedup_vs_sol(results, "eager_tf32", tmp_path / "speedup_vs_sol.png"),
            plot_spend_vs_speedup(results, "eager_tf32", tmp_path / "spend_vs_speedup.png"),
            plot_attempt_curves(group_metrics, "eager_fp32", tmp_path / "attempt_curves.png", results)]


def _title(path) -> str:
    return Image.open(path).text["Title"]


def test_plots_without_timings_say_so_in_their_titles(tmp_path):
    # the interpreter backend (no GPU): correct results, no baseline time, so no speedup to draw
    results = [_result("P1", {}), _result("P2", {})]
    for path in _plots(results, tmp_path):
        assert "no data: no eager_" in _title(path) and "time was measured" in _title(path), path.name


def test_plots_with_data_have_plain_titles(tmp_path):
    results = [_result("P1", {"eager_tf32": 1.3, "eager_fp32": 3.0}),
               _result("P2", {"eager_tf32": 0.02, "eager_fp32": 40.0})]
    for path in _plots(results, tmp_path):
        assert "no data" not in _title(path), path.name


@pytest.mark.parametrize("low, high", [(0.08, 10), (0.01, 100), (0.5, 3), (1e-3, 1e3)])
def test_log_axis_labels_never_overlap(low, high):
    fig, ax = _figure()
    ax.scatter([1, 2], [low, high])
    _plain_log_y(ax)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels(which="both")
             if t.get_text() and t.get_visible() and low * 0.5 <= t.get_position()[1] <= high * 2]
    _pyplot().close(fig)
    assert len(boxes) >= 2
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


LOG = Path(__file__).parent / "data" / "eval" / "budget_log.json"
SPEEDUP_FIELDS = ("speedup_vs_eager_fp32", "speedup_vs_eager_tf32", "speedup_vs_compile")


def _logs(timed: bool) -> list[RunSummary]:
    logs = [RunSummary.model_validate(d) for d in json.loads(LOG.read_text())]
    if timed:
        return logs
    untimed = []
    for log in logs:  # as the interpreter backend records them: no reference, no speedups, no tokens
        attempts = [a.model_copy(update={**{f: None for f in SPEEDUP_FIELDS}, "tokens_in": 0, "tokens_out": 0})
                    for a in log.attempts]
        untimed.append(log.model_copy(update={"reference_us": {}, "attempts": attempts, "tokens_in": 0,
                                              "tokens_out": 0}))
    return untimed


def test_replay_explains_its_dashes_in_one_line_each():
    grid = policy_grid(["sol", "plateau"], [1.0], [4])
    untimed = replay_table_markdown(replay(_logs(timed=False), grid))
    table_rows = [line for line in untimed.splitlines() if line.startswith("| ") and " - -> - " in line]
    assert table_rows  # dashes in the geomean column...
    notes = [line for line in untimed.splitlines() if line.startswith("- ")]
    assert any("no run has a time for eager_fp32" in n and "GPU" in n for n in notes)  # ...and why
    assert any("used no tokens" in n for n in notes)
    timed = replay_table_markdown(replay(_logs(timed=True), grid))
    assert " - -> - " not in timed and not [line for line in timed.splitlines() if line.startswith("- ")]


def test_report_of_estimated_runs_says_the_timings_are_estimates(tmp_path, monkeypatch):
    from evals.report import write_report
    from evals.store import ResultsStore

    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    store = ResultsStore(tmp_path / "ev" / "results.sqlite")
    store.init_evaluation({"source": {"suite": "mini"}, "problems": ["P1", "P2"], "tiers": ["mini"],
                           "policies": ["fixed"], "max_attempts": 10}, {"gpu": "none (cpu)", "backend": "interpreter"})
    for log in _logs(timed=False):
        attempts = [a.model_copy(update={"timing_source": "estimate"}) for a in log.attempts]
        store.finish_run(log.model_copy(update={"attempts": attempts}))
    text = write_report(store, tmp_path / "out").read_text()
    store.close()
    assert "timings are SOL-model estimates (no GPU was used)" in text
    assert "no run has a time for eager_fp32" in text  # the replay table's dashes, explained
    for png in ("fast_p.png", "speedup_vs_sol.png", "spend_vs_speedup.png", "attempt_curves.png"):
        assert "no data:" in _title(tmp_path / "out" / png)
