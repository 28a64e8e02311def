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


# every message about one kernel names it so ("kernel 'fc': ..."): checks, emitters and builds alike
_KERNEL_IN_MESSAGE = re.compile(r"kernel '([A-Za-z0-9_]+)'")


def kernels_named(text: str) -> list[str]:
    """The kernels a diagnostic's message (or several, rendered and joined) names, in order, repeats kept."""
    return _KERNEL_IN_MESSAGE.findall(text)


def has_errors(diagnostics: list[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)


def render_all(diagnostics: list[Diagnostic], filename: str = "<program>") -> str:
    return "\n".join(d.render(filename) for d in diagnostics)
