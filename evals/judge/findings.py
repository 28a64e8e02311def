"""What ends an attempt's checks: a rule the candidate broke (``Finding``), or a failure of the judge itself
(``HarnessError``), which is never a verdict on the candidate."""

from __future__ import annotations


class Finding(Exception):
    """A rule broken by the candidate; ends the attempt's checks."""

    def __init__(self, rule: str, text: str, died: bool = False):
        super().__init__(text)
        self.rule = rule
        self.text = text
        self.died = died  # the candidate process died or hung (not merely raised)


def verdict_of(finding: Finding) -> dict:
    """The reply's verdict for a finding: its rule, its one-line reason, whether the candidate died."""
    from evals.judge import verdicts

    return {"rule": finding.rule, "reason": verdicts.reason(finding.rule, finding.text), "died": finding.died}


class HarnessError(Exception):
    """The judge could not do a check it must do (its memory, a probe that could not run): the attempt fails
    with the harness's reason, never passes without the check and never counts against the candidate."""
