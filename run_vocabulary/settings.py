"""The settings of one run: one validated model that every shape of a run's settings is or extends.

``RunSettings`` is what a run is told: its tier, its stop rule with the rule's parameters (it extends
``PolicySettings``, the stop rules' knobs), its variant, backend and GPU. An evaluation's run
(``evals.runner.RunSpec``) is these settings plus where the problem and the run folder are; the graph's run
context (``graph.context.RunContext``) is these settings plus the live services; ``run.json`` records them.

Every field has a description and falls back, where a caller gives no value, on the environment variable
``MUCUTLASS_<FIELD>`` (``MUCUTLASS_MAX_ATTEMPTS=12``), then on its default, as LangGraph's reference agents
read their configuration. What only a command may name (the tiers file, the memory store, the run id) has no
environment fallback: the tiers file has its own (``MUCUTLASS_TIERS``, read by the tiers registry).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from dsl_compiler.backend import BACKENDS
from run_vocabulary.budgets import Budget
from run_vocabulary.policies import PolicyError, PolicySettings, parse_policy
from run_vocabulary.variants import DEFAULT_VARIANT, Variant, get_variant, stop_policy

ENV_PREFIX = "MUCUTLASS_"
DEFAULT_POLICY = "sol+plateau"
# named by the command that starts or resumes a run, never by the environment nor by a run folder
NAMED_BY_COMMAND = ("tiers_file", "memory_path")
# the hard budgets: a resume may raise them (the command line's value in place of the recorded one)
BUDGET_FIELDS = ("budget_usd", "budget_tokens", "budget_minutes")


class RunSettings(PolicySettings):
    """What one optimization run is told. ``policy`` names the stop rule with the parameters given for it
    (``plateau:w=8``, run_vocabulary.policies.PolicyChoice); the parameters it names set their fields."""

    model_config = ConfigDict(frozen=False, validate_assignment=True, extra="forbid")

    tier: str = Field("offline", description="the writer: a tier of the registry, or playback:FILE")
    policy: str = Field(DEFAULT_POLICY, description="the stop rule with its parameters, NAME[:KEY=VALUE]...")
    variant: str = Field(DEFAULT_VARIANT, description="what the writer answers with, and whether SOL guides it")
    backend: str = Field("interpreter", description="what runs a program: cutlass, interpreter or auto")
    gpu: str = Field("h200", description="the GPU of the SOL model")
    memory: bool = Field(False, description="notes of attempts kept across problems (graph.memory)")
    tiers_file: str | None = Field(None, description="extra tiers TOML the command names")
    memory_path: str | None = Field(None, description="a SQLite memory store shared by an evaluation's runs; "
                                    "None: this process only")
    run_id: str = Field("", description="the run's id (its checkpoint thread); made when the run starts")
    # hard budgets (run_vocabulary.budgets): checked between attempts under every policy; None is no cap
    budget_usd: float | None = Field(None, gt=0, description="dollars the run may spend on model calls "
                                     "(token counts at the tier's prices; the offline tier costs 0)")
    budget_tokens: int | None = Field(None, gt=0, description="model tokens (input + output) the run may spend")
    budget_minutes: float | None = Field(None, gt=0, description="minutes of work the run may spend (model calls, "
                                         "builds, validation, timing, set-up), summed over its resumes")

    @model_validator(mode="before")
    @classmethod
    def _environment_fallback(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = dict(data)
        for name in cls.model_fields:
            if name in given or name in NAMED_BY_COMMAND or name == "run_id":
                continue
            value = os.environ.get(ENV_PREFIX + name.upper(), "").strip()
            if value:
                given[name] = value
        return given

    @model_validator(mode="after")
    def _check(self) -> "RunSettings":
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        get_variant(self.variant)  # VariantError (a ValueError) for an unknown name
        try:
            choice = parse_policy(self.policy)
        except PolicyError as exc:
            raise ValueError(str(exc)) from None
        for field, value in choice.fields().items():
            if field in self.model_fields_set and getattr(self, field) != value:
                raise ValueError(f"policy {self.policy!r} sets {field} to {value:g}, but {field} is "
                                 f"{getattr(self, field):g}; give it once")
            # object.__setattr__: an assignment would run this validator again
            object.__setattr__(self, field, value)
        object.__setattr__(self, "policy", choice.label)
        return self

    @property
    def stop_rule(self) -> str:
        """The rule's name without its parameters (``plateau`` of ``plateau:w=8``)."""
        return parse_policy(self.policy).name

    @property
    def stop_policy(self) -> str:
        """The stop rule applied: the rule without its SOL test in variants SOL does not guide."""
        return stop_policy(self.stop_rule, self.variant)

    @property
    def budget(self) -> Budget:
        """The run's hard budgets (run_vocabulary.budgets)."""
        return Budget(self.budget_usd, self.budget_tokens, self.budget_minutes)

    @property
    def variant_spec(self) -> Variant:
        return get_variant(self.variant)

    def run_settings(self) -> "RunSettings":
        """Only the run's settings, also of a model extending them (a spec, a context)."""
        return RunSettings.model_validate({name: getattr(self, name) for name in RunSettings.model_fields})

    def recorded(self) -> dict[str, Any]:
        """What a run folder records (run.json): every setting but those only a command may name."""
        return self.run_settings().model_dump(exclude=set(NAMED_BY_COMMAND))
