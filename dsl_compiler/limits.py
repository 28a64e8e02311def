"""Time limits around calls into code we do not control (a problem's import, ``Model()``,
``get_inputs()``, ``get_init_inputs()``): a call that does not return in time raises
``TimeLimitExceeded`` with a one-line message instead of hanging the command.

The limit is a SIGALRM timer, so it applies in a process's main thread (every command and every
worker process calls problem code there); elsewhere the call runs without one. Limits nest: an
inner limit never extends an outer one, and the outer one is restored when the inner ends.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A problem's setup calls build tensors and a module on the CPU or the meta device; even KernelBench's
# largest take seconds. Overridden by MUCUTLASS_PROBLEM_TIME_LIMIT_S (tests use a small one).
PROBLEM_CALL_LIMIT_S = 120.0
LIMIT_ENV = "MUCUTLASS_PROBLEM_TIME_LIMIT_S"


class TimeLimitExceeded(TimeoutError):
    """A call into problem code ran past its time limit; the message is one line."""


def problem_call_limit_s() -> float:
    try:
        value = float(os.environ.get(LIMIT_ENV, PROBLEM_CALL_LIMIT_S))
    except ValueError:
        return PROBLEM_CALL_LIMIT_S
    return value if value > 0 else PROBLEM_CALL_LIMIT_S


_deadlines: list[tuple[float, str]] = []  # (monotonic deadline, what) of the limits in force, innermost last


def _on_alarm(signum, frame) -> None:
    if _deadlines:
        _, what = _deadlines[-1]
        raise TimeLimitExceeded(what)


@contextmanager
def time_limit(what: str, seconds: float | None = None) -> Iterator[None]:
    """Run the body under a limit of ``seconds`` (default: the problem-call limit); past it, raise
    ``TimeLimitExceeded("<what> did not return within N s")``."""
    seconds = problem_call_limit_s() if seconds is None else seconds
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    now = time.monotonic()
    deadline = now + seconds
    if _deadlines and _deadlines[-1][0] <= deadline:  # an outer limit ends first: it stays in force
        deadline, message = _deadlines[-1]
    else:
        message = f"{what} did not return within {seconds:g} s"
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    _deadlines.append((deadline, message))
    # re-fires every second: problem code that swallows the first exception is interrupted again
    signal.setitimer(signal.ITIMER_REAL, max(deadline - now, 1e-3), 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _deadlines.pop()
        signal.signal(signal.SIGALRM, previous)
        if _deadlines:  # the outer limit's remaining time
            signal.setitimer(signal.ITIMER_REAL, max(_deadlines[-1][0] - time.monotonic(), 1e-3), 1.0)
