"""The adversarial report's results file: controls first, rewritten after every case, and valid with the
cases not reached listed when the run is stopped part-way (a shard's time limit on the H200)."""

from __future__ import annotations

import json

import pytest

from tests.adversarial import report
from tests.adversarial.cases import CASES, CONTROLS
from tests.adversarial.runner import Outcome


class FakeHarness:
    """What report.main asks of a harness, without a worker."""

    def __init__(self, settings):
        self.settings = settings
        self.closed = False

    def worker_info(self) -> dict:
        return {"cuda": False, "gpu_name": None, "torch": "test"}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    calls: list[str] = []
    harnesses: list[FakeHarness] = []

    def make(settings):
        harnesses.append(FakeHarness(settings))
        return harnesses[-1]

    def run_control(harness, control, on_gpu, scratch):
        calls.append(control.file)
        return Outcome(rule=None, rejected=False, caught=True, reason="")

    def run_case(harness, case, on_gpu, scratch):
        calls.append(case.id)
        if fake.stop_at == case.id:
            raise SystemExit(124)  # as the SIGTERM of `timeout` does
        return Outcome(rule=case.rule, rejected=True, caught=True, reason="caught", next_clean=True, wall_s=0.01)

    fake.stop_at = None
    monkeypatch.setattr(report, "Harness", make)
    monkeypatch.setattr(report, "run_control", run_control)
    monkeypatch.setattr(report, "run_case", run_case)
    monkeypatch.setattr(report, "stage_of", lambda harness, case, on_gpu: "validate")
    fake.calls, fake.harnesses = calls, harnesses
    return fake


def _cpu_cases():
    return [c for c in CASES if c.cpu]


def test_controls_run_first_and_a_complete_run_lists_nothing_left(fake, tmp_path):
    cases = _cpu_cases()[:3]
    controls = [c for c in CONTROLS if c.cpu][:2]
    only = [c.file for c in cases] + [c.file for c in controls]
    code = report.main(["--device", "cpu", "--out", str(tmp_path), "--only", *only])
    assert code == 0
    # a control file may run on several problems: every control of the files named runs
    controls = [c for c in CONTROLS if c.cpu and c.file in {x.file for x in controls}]
    assert fake.calls[:len(controls)] == [c.file for c in controls]
    doc = json.loads(next(tmp_path.glob("*-adversarial.json")).read_text())
    assert doc["complete"] is True and doc["not_reached"] == []
    assert [r["case"] for r in doc["rows"]] == [c.id for c in cases]
    assert doc["controls_passed"] == f"{len(controls)}/{len(controls)}"
    rows = [json.loads(line) for line in next(tmp_path.glob("*-adversarial.jsonl")).read_text().splitlines()]
    assert len(rows) == len(cases) + len(controls)
    assert fake.harnesses[0].closed


def test_a_run_stopped_part_way_leaves_a_valid_file_with_the_rest_listed(fake, tmp_path):
    cases = _cpu_cases()[:4]
    fake.stop_at = cases[2].id
    with pytest.raises(SystemExit):
        report.main(["--device", "cpu", "--out", str(tmp_path), "--shard", "0/1", "--only", *[c.file for c in cases]])
    doc = json.loads(next(tmp_path.glob("*-adversarial.shard0.json")).read_text())
    assert doc["complete"] is False
    assert [r["case"] for r in doc["rows"]] == [c.id for c in cases[:2]]
    assert doc["not_reached"] == [c.id for c in cases[2:]]
    assert doc["cases"] == 2 and doc["caught"] == 2
    assert fake.harnesses[0].closed

    # the merge keeps what the partial shard did and lists what it did not; the exit code says it is not whole
    code = report.main(["--merge", str(next(tmp_path.glob("*.shard0.json"))), "--out", str(tmp_path / "merged")])
    assert code == 1
    merged = json.loads(next((tmp_path / "merged").glob("*-adversarial.json")).read_text())
    assert merged["not_reached"] == [c.id for c in cases[2:]] and merged["complete"] is False
    assert "Not reached" in next((tmp_path / "merged").glob("*-adversarial.md")).read_text()


def test_the_budget_stops_starting_cases_and_lists_them(fake, tmp_path):
    cases = _cpu_cases()[:3]
    code = report.main(["--device", "cpu", "--out", str(tmp_path), "--budget-s", "0", "--only", *[c.file for c in cases]])
    assert code == 1
    doc = json.loads(next(tmp_path.glob("*-adversarial.json")).read_text())
    assert doc["rows"] == [] and doc["not_reached"] == [c.id for c in cases]
    assert fake.calls == []
