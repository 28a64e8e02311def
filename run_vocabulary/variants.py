"""Agent variants: the paper's comparison axis (what the model writes, and whether the speed of light
guides it). One home for their names, their default and what each one turns on.

- ``dsl+sol``: μCUTLASS programs; the SOL report in the prompt, hypotheses ranked by ROI against the
  gap to SOL, SOL-based stop rules.
- ``dsl``: μCUTLASS programs in the flat generate-compile-test-profile loop: no SOL report, no ROI
  plan, no SOL-based stop rule (the harness still computes SOL for the report and the ceiling flag).
- ``cuda``: a KernelBench ``ModelNew`` with the model's own CUDA kernels (``load_inline``), flat loop.
- ``cuda+sol``: the same with the SOL report in the prompt, ROI planning and SOL stop rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_VARIANT = "dsl+sol"


@dataclass(frozen=True)
class Variant:
    name: str
    language: Literal["mcu", "python"]  # what the writer answers with: a μCUTLASS program or a ModelNew module
    sol_guided: bool  # SOL report in the prompt, ROI planning, SOL-based stop rules


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("dsl+sol", "mcu", True),
    Variant("dsl", "mcu", False),
    Variant("cuda", "python", False),
    Variant("cuda+sol", "python", True),
)}


class VariantError(ValueError):
    """An unknown variant name; one-line message."""


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise VariantError(f"unknown variant {name!r}; expected one of {', '.join(VARIANTS)}") from None


def check_variants(names: list[str]) -> list[str]:
    """The names, each known and listed once; raises VariantError otherwise."""
    if not names:
        raise VariantError(f"no variants given; write e.g. --variants {','.join(VARIANTS)}")
    for n in names:
        get_variant(n)
    if len(set(names)) != len(names):
        raise VariantError(f"a variant is listed twice in {','.join(names)}")
    return list(names)


def stop_policy(policy: str, variant: str) -> str:
    """The stop rule a run of ``variant`` applies for the requested ``policy``: variants without SOL
    guidance drop the SOL test (``sol`` runs to the budget, ``sol+plateau`` is ``plateau``)."""
    if get_variant(variant).sol_guided:
        return policy
    return {"sol": "fixed", "sol+plateau": "plateau"}.get(policy, policy)
