"""benchmarks/bench_offline.py end to end on the interpreter (no GPU: timings are estimates)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_offline", ROOT / "benchmarks" / "bench_offline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_geomean_skips_missing_values():
    bench = load_bench()
    assert bench.geomean([2.0, 8.0, None, 0.0]) == 4.0
    assert bench.geomean([]) is None


def test_bench_writes_table_and_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_RECORD", str(tmp_path / "record.json"))
    bench = load_bench()
    rc = bench.main(["--suite", "smoke", "--only", "02_linear_relu_tiny", "--backend", "interpreter",
                     "--max-attempts", "1", "--out", str(tmp_path)])
    assert rc == 0
    (json_path,) = tmp_path.glob("*-h200-offline.json")
    doc = json.loads(json_path.read_text())
    assert set(doc["summary"]) >= {"geomean_speedup_vs_eager_fp32", "geomean_speedup_vs_eager_tf32",
                                   "geomean_speedup_vs_compile", "geomean_sol_fraction", "correct", "total"}
    (row,) = doc["rows"]
    assert row["correct"] and row["tokens"] == 0 and row["timing_source"] == "estimate"
    assert row["ours_us"] > 0 and row["t_sol_us"] > 0
    assert "bound" in row["why"]  # a launch-bound toy is far from SOL, and the report says why
    md = json_path.with_suffix(".md").read_text()
    assert "| 02_linear_relu_tiny |" in md and "**geomean**" in md


def test_bad_suite_is_an_input_error(tmp_path, capsys):
    bench = load_bench()
    assert bench.main(["--suite", "no-such-suite", "--out", str(tmp_path)]) == 1
    assert "error:" in capsys.readouterr().err
