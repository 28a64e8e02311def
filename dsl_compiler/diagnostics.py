"""Errors as values: every problem with a program is a Diagnostic with a location and a fix hint,
written so that a model can repair its program from the message alone."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dsl_compiler.ir import Span


class Diagnostic(BaseModel):
    """One finding about a program.

    ``code`` is a stable identifier of the error class (``syntax``, ``undefined-name``,
    ``shape-mismatch``, ``alignment``, ``tile``, ``cluster``, ``smem``, ``reduction``, ``dtype``,
    ``unsupported``, ``build``, ...). ``found`` says what the program has, ``expected`` what is
    allowed, ``hint`` one line on how to fix it.
    """

    model_config = ConfigDict(frozen=True)
    severity: Literal["error", "warning"] = "error"
    code: str
    message: str
    span: Span | None = None
    found: str | None = None
    expected: str | None = None
    hint: str | None = None

    def render(self, filename: str = "<program>") -> str:
        where = f"{filename}:{self.span.line}:{self.span.column}" if self.span else filename
        lines = [f"{where}: {self.severity}[{self.code}]: {self.message}"]
        if self.found is not None:
            lines.append(f"  found:    {self.found}")
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.hint is not None:
            lines.append(f"  hint:     {self.hint}")
        return "\n".join(lines)


# the name a μCUTLASS program's diagnostics carry where they enter a model's prompt
PROGRAM_FILE = "program.mcu"

_RENDERED = re.compile(r"^(?:(?P<where>.*?): )?(?P<severity>error|warning)\[(?P<code>[^\]]*)\]: (?P<message>.*)$")
_WHERE = re.compile(r":(\d+):(\d+)$")
_DETAIL = re.compile(r"^  (found|expected|hint): +(.*)$")


def failure(message: str, code: str = "failure") -> Diagnostic:
    """A failure without a location in the program (a tier that wrote nothing, a crashed build, a
    wrong result, a ModelNew module's compiler output) as a Diagnostic."""
    return Diagnostic(code=code, message=message)


# codes of diagnostics that never had a place in a program: their message is the whole text
UNPLACED_CODES = ("failure", "text")


def model_text(diagnostic: Diagnostic, filename: str = PROGRAM_FILE) -> str:
    """How a diagnostic reads where it enters a model's prompt: rendered with file, location and
    hint, or, for a failure outside the program (``UNPLACED_CODES``), its message as written."""
    return diagnostic.message if diagnostic.code in UNPLACED_CODES else diagnostic.render(filename)


def as_diagnostic(value: Diagnostic | dict | str) -> Diagnostic:
    """A Diagnostic from its value, its JSON form, or the rendered text that records and checkpoints
    held before diagnostics travelled as values (read back field by field where it has the rendered
    shape, else kept whole as the message)."""
    if isinstance(value, Diagnostic):
        return value
    if not isinstance(value, str):
        return Diagnostic.model_validate(value)
    first, *rest = value.split("\n")
    m = _RENDERED.match(first)
    details = [_DETAIL.match(line) for line in rest]
    if m is None or not all(details):
        return failure(value, code="text")
    at = _WHERE.search(m["where"] or "")
    span = Span(line=int(at[1]), column=int(at[2]), end_line=int(at[1]), end_column=int(at[2])) if at else None
    return Diagnostic(severity=m["severity"], code=m["code"], message=m["message"], span=span,
                      **{d[1]: d[2] for d in details})


# every message about one kernel names it so ("kernel 'fc': ..."): checks, emitters and builds alike
_KERNEL_IN_MESSAGE = re.compile(r"kernel '([A-Za-z0-9_]+)'")


def kernels_named(text: str) -> list[str]:
    """The kernels a diagnostic's message (or several, rendered and joined) names, in order, repeats kept."""
    return _KERNEL_IN_MESSAGE.findall(text)


def has_errors(diagnostics: list[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)


def render_all(diagnostics: list[Diagnostic], filename: str = "<program>") -> str:
    return "\n".join(d.render(filename) for d in diagnostics)
