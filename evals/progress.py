"""A status line on the terminal while a command waits (loading a problem, validating an attempt, timing a
reference): a spinner naming the stage, redrawn in place, gone when the wait ends. It writes to stderr and
only where stderr is a terminal, so pipes, files and ``--json`` output stay as they were."""

from __future__ import annotations

from typing import Any


class Status:
    """``show(text)`` starts or updates the line, ``stop()`` clears it; ``enabled=False`` makes both do nothing."""

    def __init__(self, enabled: bool = True, console: Any = None):
        self._status = None
        self._console = console
        self.enabled = enabled

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._console

    def show(self, text: str) -> None:
        if not self.enabled or not self.console.is_terminal:
            return
        if self._status is None:
            self._status = self.console.status(f"{text}...", spinner="dots")
            self._status.start()
        else:
            self._status.update(f"{text}...")
        # drawn now, not at the next of the spinner's ticks: a stage shorter than a tick is still shown once
        live = getattr(self._status, "_live", None)
        if live is not None:
            live.refresh()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __enter__(self) -> Status:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
