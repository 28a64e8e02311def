"""The Ray executor on a private local Ray instance, with a fake run function: every run's
attempts stream back into the store before its summary, and all runs finish."""

import pytest

ray = pytest.importorskip("ray")

from evals.executors import RayExecutor  # noqa: E402
from evals.runner import EvalConfig, StoreSink  # noqa: E402
from evals.store import ResultsStore  # noqa: E402

BROKEN_ON_GEMM = "tests.data.eval.fake_run:broken"  # fails on gemm_a, runs the others


class RecordingSink(StoreSink):
    def __init__(self, store):
        super().__init__(store)
        self.events = []

    def started(self, spec):
        self.events.append(("started", spec.problem))
        super().started(spec)

    def attempt(self, spec, attempt):
        self.events.append(("attempt", spec.problem, attempt.index))
        super().attempt(spec, attempt)

    def finished(self, spec, summary):
        self.events.append(("finished", spec.problem))
        super().finished(spec, summary)

    def failed(self, spec, error):
        self.events.append(("failed", spec.problem, error))
        super().failed(spec, error)


def test_local_ray_run_streams_into_the_store(tmp_path):
    paths = {}
    for n in ("gemm_a", "conv_b", "mlp_c"):
        p = tmp_path / f"{n}.py"
        p.write_text("# problem\n")
        paths[f"mini/{n}"] = str(p)
    config = EvalConfig(source={"suite": "mini"}, problems=list(paths), tiers=["offline", "other"],
                        policies=["fixed", "sol"], max_attempts=3, backend="interpreter", executor="ray:local")
    from evals.runner import plan_runs

    store = ResultsStore(tmp_path / "ev" / "results.sqlite")
    store.init_evaluation(config.model_dump(), {})
    specs = plan_runs(config, paths, tmp_path / "ev")
    assert len(specs) == 6  # one task per (problem, tier): policies are derived by replay
    sink = RecordingSink(store)
    RayExecutor("local", num_cpus=2).run(specs, BROKEN_ON_GEMM, sink)
    assert not ray.is_initialized()  # the executor shut down the instance it started

    failed = [e for e in sink.events if e[0] == "failed"]
    assert sorted(failed) == [("failed", "mini/gemm_a", "RuntimeError: boom in the graph")] * 2
    for problem in ("mini/conv_b", "mini/mlp_c"):
        kinds = [e[0] for e in sink.events if e[1] == problem]
        assert kinds.count("attempt") == 2 * 3 and kinds.count("finished") == 2
        assert kinds.index("started") < kinds.index("attempt") < kinds.index("finished")
    assert len(store.finished_keys()) == 4
    assert set(store.failures()) == {("mini/gemm_a", "offline", "fixed", "dsl+sol"), ("mini/gemm_a", "other", "fixed", "dsl+sol")}
    assert all(len(s.attempts) == 3 for s in store.summaries())
