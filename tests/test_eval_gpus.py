"""Several GPUs: the local executor deals problems (each with all its runs) to one worker per device
round-robin, pins each worker to its device before anything starts (CUDA_VISIBLE_DEVICES, inherited by the
judge's processes), shares the host's cores out among the workers' builds, and gives the same results as
one worker. The devices are named by MUCUTLASS_GPU_IDS, so this runs on a machine without GPUs."""

from __future__ import annotations

import os

from evals.executors import LocalExecutor, assign_round_robin
from evals.runner import RunSpec

PINNED = "tests.data.eval.fake_run:pinned"


class Collect:
    def __init__(self):
        self.summaries, self.failures, self.attempts = {}, {}, []

    def started(self, spec):
        pass

    def attempt(self, spec, attempt):
        self.attempts.append((spec.problem, attempt.index))

    def finished(self, spec, summary):
        self.summaries[spec.problem] = summary

    def failed(self, spec, error):
        self.failures[spec.problem] = error


def _specs(tmp_path, n=5, tag="a"):
    specs = []
    for i in range(n):
        p = tmp_path / f"p{i}.py"
        p.write_text("# problem\n")
        specs.append(RunSpec(problem=f"mini/p{i}", problem_path=str(p), tier="offline", policy="fixed", max_attempts=3,
                             backend="interpreter", run_dir=str(tmp_path / tag / f"p{i}")))
    return specs


def test_problems_are_dealt_round_robin_with_all_their_runs(tmp_path):
    specs = [s.model_copy(update={"variant": v}) for s in _specs(tmp_path, n=3) for v in ("dsl", "dsl+sol")]
    shares = assign_round_robin(specs, 2)
    assert [[(s.problem, s.variant) for s in share] for share in shares] == [
        [("mini/p0", "dsl"), ("mini/p0", "dsl+sol"), ("mini/p2", "dsl"), ("mini/p2", "dsl+sol")],
        [("mini/p1", "dsl"), ("mini/p1", "dsl+sol")]]
    assert [len(x) for x in assign_round_robin(specs[:2], 3)] == [2, 0, 0]


def test_runs_are_spread_over_the_named_devices_with_the_same_results(tmp_path, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_GPU_IDS", "3,5")
    monkeypatch.delenv("MUCUTLASS_BUILD_JOBS", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    spread = Collect()
    LocalExecutor().run(_specs(tmp_path, tag="two"), PINNED, spread)  # one worker per named device
    assert not spread.failures and len(spread.summaries) == 5
    where = {k: s.backend_reason for k, s in spread.summaries.items()}
    share = max(1, (os.cpu_count() or 1) // 2)
    assert where == {f"mini/p{i}": f"gpu={'35'[i % 2]} build_jobs={share}" for i in range(5)}
    assert sorted(spread.attempts) == [(f"mini/p{i}", a) for i in range(5) for a in (1, 2, 3)]

    monkeypatch.delenv("MUCUTLASS_GPU_IDS")
    one = Collect()
    LocalExecutor(1).run(_specs(tmp_path, tag="one"), PINNED, one)  # in this process, nothing pinned
    assert set(one.summaries) == set(spread.summaries)
    for key, summary in one.summaries.items():
        other = spread.summaries[key]
        assert [a.model_dump() for a in summary.attempts] == [a.model_dump() for a in other.attempts]
        assert (summary.best_index, summary.best_t_us) == (other.best_index, other.best_t_us)


def test_an_explicit_build_share_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_GPU_IDS", "0,1")
    monkeypatch.setenv("MUCUTLASS_BUILD_JOBS", "3")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    got = Collect()
    LocalExecutor().run(_specs(tmp_path, n=2), PINNED, got)
    assert {s.backend_reason for s in got.summaries.values()} == {"gpu=0 build_jobs=3", "gpu=1 build_jobs=3"}
