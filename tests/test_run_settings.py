"""One settings model for a run: the evaluation's spec, the graph's context and run.json all carry
``run_vocabulary.settings.RunSettings``, with its descriptions, its environment fallback and its policy labels."""

from __future__ import annotations

import pytest

from evals.runner import EvalConfig, RunSpec, plan_runs
from graph.context import RunContext
from run_vocabulary.policies import PolicySettings
from run_vocabulary.settings import NAMED_BY_COMMAND, RunSettings


class _NoServices:
    def close(self) -> None:
        pass


def test_the_spec_and_the_context_are_the_run_settings():
    assert issubclass(RunSpec, RunSettings) and issubclass(RunContext, RunSettings)
    assert issubclass(RunSettings, PolicySettings)
    assert set(RunSettings.model_fields) <= set(RunSpec.model_fields)
    assert set(RunContext.model_fields) - set(RunSettings.model_fields) == {"tier_impl", "services"}


def test_every_setting_says_what_it_is():
    missing = [name for name, f in RunSettings.model_fields.items() if not f.description]
    assert missing == []


def test_a_policy_label_sets_its_parameters_and_is_kept_canonical():
    s = RunSettings(policy="sol+plateau: w=8 :eps=1")
    assert (s.policy, s.stop_rule, s.eps, s.plateau_window) == ("sol+plateau:eps=1:w=8", "sol+plateau", 1.0, 8)
    assert RunSettings(policy="plateau:w=8", plateau_window=8).plateau_window == 8
    with pytest.raises(ValueError, match="sets plateau_window to 8, but plateau_window is 3"):
        RunSettings(policy="plateau:w=8", plateau_window=3)
    with pytest.raises(ValueError, match="the sol policy takes eps, not 'w'"):
        RunSettings(policy="sol:w=3")


def test_a_changed_setting_is_checked_again():
    s = RunSettings()
    s.backend = "cutlass"
    assert s.backend == "cutlass"
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        s.backend = "gpu"
    with pytest.raises(ValueError, match="unknown variant"):
        RunSettings(variant="triton")


def test_the_environment_fills_what_the_caller_left_out(monkeypatch):
    monkeypatch.setenv("MUCUTLASS_MAX_ATTEMPTS", "7")
    monkeypatch.setenv("MUCUTLASS_POLICY", "plateau:w=5")
    monkeypatch.setenv("MUCUTLASS_MEMORY_PATH", "/elsewhere/memory.sqlite")  # only a command names it
    s = RunSettings()
    assert (s.max_attempts, s.policy, s.plateau_window, s.memory_path) == (7, "plateau:w=5", 5, None)
    assert RunSettings(max_attempts=3).max_attempts == 3  # what the caller gives wins
    monkeypatch.setenv("MUCUTLASS_MAX_ATTEMPTS", "none")
    with pytest.raises(ValueError, match="max_attempts"):
        RunSettings()


def test_settings_recorded_by_an_older_run_folder_still_restore():
    # run.json as written before the settings were one model: a rule name, no min_gain, a key since dropped
    older = {"tier": "offline", "policy": "sol+plateau", "variant": "dsl+sol", "max_attempts": 5, "eps": 1.0,
             "plateau_window": 4, "token_budget": 1000, "baseline": "best", "backend": "interpreter", "gpu": "h200",
             "memory": False, "run_id": "abc", "tiers_file": "/someone/elses/tiers.toml", "retired_knob": 1}
    ctx = RunContext.from_settings(older, services=_NoServices())
    assert (ctx.policy, ctx.eps, ctx.plateau_window, ctx.max_attempts, ctx.run_id) == ("sol+plateau", 1.0, 4, 5, "abc")
    assert ctx.tiers_file is None  # a run folder never names the tiers file
    recorded = ctx.settings()
    assert not set(NAMED_BY_COMMAND) & set(recorded)
    assert RunContext.from_settings(recorded, services=_NoServices()).settings() == recorded


def test_the_graph_runs_an_evaluation_spec_with_its_settings(tmp_path, monkeypatch):
    import graph.runner as runner

    config = EvalConfig(source={"suite": "mini"}, problems=["mini/a"], tiers=["offline"], policies_mode="run",
                        policies=["plateau:w=3"], max_attempts=9, backend="interpreter")
    (spec,) = plan_runs(config, {"mini/a": str(tmp_path / "a.py")}, tmp_path)
    seen = {}
    monkeypatch.setattr(runner, "run_optimize", lambda path, ctx, run_dir, on_event=None: seen.update(ctx=ctx))
    monkeypatch.setattr(runner, "shared_services", lambda gpu="h200": _NoServices())
    runner.run_spec(spec)
    ctx = seen["ctx"]
    assert ctx.run_settings() == spec.run_settings()
    assert (ctx.policy, ctx.stop_rule, ctx.plateau_window, ctx.max_attempts) == ("plateau:w=3", "plateau", 3, 9)
    assert ctx.memory and ctx.memory_path == spec.memory_path
