"""benchmarks/bench_runtime.py on the CPU: the plans it measures and its table (the timings need the GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_runtime  # noqa: E402


def test_plans_name_the_casts_the_runtime_fuses_and_the_graph_decision():
    rows = {r["problem"]: r for r in bench_runtime.plan_rows(bench_runtime.chosen_problems(
        ["01_gemm_tiny", "01_gemm_square", "20_conv2d_bias_relu"]))}
    assert set(rows) == {"smoke/01_gemm_tiny", "builtin/01_gemm_square", "builtin/20_conv2d_bias_relu"}
    assert rows["builtin/01_gemm_square"]["casts"] == ["a_f16", "b_f16"]
    assert rows["builtin/01_gemm_square"]["t_est_fused_us"] < rows["builtin/01_gemm_square"]["t_est_us"]
    assert rows["builtin/20_conv2d_bias_relu"]["casts"] == ["x_cl_f16"]
    assert not rows["builtin/01_gemm_square"]["graph_auto"]  # 270 us of GPU work is not launch-bound


def _setting(t_us, correct=True, bits=True):
    return {"t_us": t_us, "host_us": 12.5, "correct": correct, "same_bits_as_plain": bits, "replays": 3, "last_reason": "", "fused_jobs": 2}


def test_table_flags_a_wrong_or_changed_result_and_shows_the_best_setting():
    settings = {f"graph {g}, fused {f}": _setting(t) for (g, f), t in zip(bench_runtime.SETTINGS, (40.0, 38.0, 20.0, 19.0))}
    bad = dict(settings)
    bad["graph on, fused on"] = _setting(19.0, bits=False)
    doc = {"gpu": "h200", "date": "2026-12-01", "rows": [
        {"problem": "smoke/a", "steps": 3, "casts": ["x"], "graph_auto": True, "settings": settings, "host_est_us": 30.0},
        {"problem": "smoke/b", "steps": 3, "casts": ["x", "y"], "graph_auto": False, "settings": bad,
         "cast_timing": {"jobs": 2, "bytes": 1, "t_steps_us": 5.0, "t_fused_us": 3.0, "steps_tb_s": 1.0, "fused_tb_s": 2.0}},
        {"problem": "smoke/c", "error": "build failed"}]}
    md = bench_runtime.to_markdown(doc)
    lines = [ln for ln in md.splitlines() if ln.startswith("| smoke/")]
    assert "| 40.0 | 38.0 | 20.0 | 19.0 | 2.11x | yes | yes | on | 12.5 / 30.0 |" in lines[0]
    assert "**no**" in lines[1] and "5.0 / 3.0 (1.0 / 2.0)" in lines[1]
    assert lines[2].endswith("build failed |")


def test_auto_graph_decisions_match_the_h200_winners_of_the_committed_run():
    """The host costs in sol_models.estimate were fitted to this run: `auto` must pick the faster of eager and
    graph replay on at least 13 of its 14 programs (the README says so)."""
    import json

    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "2026-12-01-h200-runtime.json"
    measured = {r["problem"]: r["settings"] for r in json.loads(results.read_text())["rows"]}
    rows = bench_runtime.plan_rows(bench_runtime.chosen_problems())
    assert {r["problem"] for r in rows} == set(measured)
    right = sum(r["graph_auto"] == (measured[r["problem"]]["graph on, fused off"]["t_us"]
                                    < measured[r["problem"]]["graph off, fused off"]["t_us"]) for r in rows)
    assert right >= 13, right
