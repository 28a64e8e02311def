"""Time limits around calls into code we do not control (a problem's import, ``Model()``,
``get_inputs()``, ``get_init_inputs()``): a call that does not return in time raises
``TimeLimitExceeded`` with a one-line message instead of hanging the command.

The limit is a SIGALRM timer, so it applies in a process's main thread (every command and every
worker process calls problem code there); elsewhere the call runs without one. Limits nest: an
inner limit never extends an outer one, and the outer one is restored when the inner ends.

A signal stops only code that lets itself be stopped: a loop around ``except BaseException: pass``
swallows every interruption. ``ChildCalls`` runs such calls in a child process instead, which the
parent kills when a call runs past its limit; the commands load a problem there first, and only then
in their own process.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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
    _report(("enter", what))
    # re-fires every second: problem code that swallows the first exception is interrupted again
    signal.setitimer(signal.ITIMER_REAL, max(deadline - now, 1e-3), 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _deadlines.pop()
        _report(("exit", what))
        signal.signal(signal.SIGALRM, previous)
        if _deadlines:  # the outer limit's remaining time
            signal.setitimer(signal.ITIMER_REAL, max(_deadlines[-1][0] - time.monotonic(), 1e-3), 1.0)


# -- calls in a child process, killed past their limit ------------------------------------------------------------

_reporter: list[Callable[[tuple], None]] = []  # in a ChildCalls child: sends each limit's entry and exit to the parent


def _report(note: tuple) -> None:
    if not _reporter:
        return
    # an outer limit's alarm must not cut a message in half
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        _reporter[0](note)
    except (OSError, ValueError):  # the parent has gone: the limit itself still holds
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


GRACE_S = 2.0  # past the child's own limit, before the parent kills it
# a call's time at the most, in limits: a problem check spends two (its import, then its setup under one outer
# limit), so this stops only a call that keeps entering new limits
LIMITED_CALLS = 6


class ChildCalls:
    """Calls into problem code in one child process, reused for every call of a command (a problem each).

    Each call runs under the usual limits in the child, which reports every limit's entry and exit; the
    parent kills the child when it has heard nothing for a limit plus ``GRACE_S`` (so a limit the call
    ignores ends there), or when one call has taken ``LIMITED_CALLS`` limits, and raises ``TimeLimitExceeded``
    naming the limit in force (``<file>: get_inputs() did not return within N s ...``). A child that dies
    raises ``ChildDied``. The next call starts a fresh child. The child is forked once torch is imported
    here, so it starts in milliseconds; where CUDA is initialised already it is spawned instead. A forked
    child cannot use CUDA once this process has asked CUDA anything (``torch.cuda.is_available()`` is
    enough, as seen on an H200), so the commands start it before they ask; problem setup there runs on the
    CPU and on meta tensors.
    ``fn`` and its arguments and result travel by pickle: ``fn`` is a module-level function."""

    def __init__(self, limit_s: float | None = None):
        self.limit_s = problem_call_limit_s() if limit_s is None else limit_s
        self._proc = None
        self._conn = None

    def __enter__(self) -> ChildCalls:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._proc is None:
            self._start()
        try:
            self._conn.send((fn, args))
            return self._wait()
        except BaseException:
            if self._proc is not None and self._proc.is_alive():  # interrupted here, or its call failed to travel
                self._kill()
            raise

    def _wait(self) -> Any:
        started = last = time.monotonic()
        stages: list[str] = []
        while True:
            now = time.monotonic()
            deadline = min(last + self.limit_s + GRACE_S, started + LIMITED_CALLS * self.limit_s + GRACE_S)
            if now >= deadline:
                self._kill()
                what = stages[-1] if stages else "the call"
                raise TimeLimitExceeded(f"{what} did not return within {self.limit_s:g} s (it ignored the "
                                        "interruption; its process was stopped)")
            if not self._conn.poll(min(deadline - now, 0.5)):
                if not self._proc.is_alive():
                    raise self._died(stages)
                continue
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                raise self._died(stages) from None
            except Exception as exc:  # noqa: BLE001 - an answer that does not unpickle here (a class of its own)
                self._kill()
                raise ChildDied(f"{stages[-1] if stages else 'the call'}: its answer cannot be read here "
                                f"({type(exc).__name__}: {exc})") from None
            last = time.monotonic()
            if kind == "enter":
                stages.append(value)
            elif kind == "exit":
                if value in stages:
                    del stages[len(stages) - 1 - stages[::-1].index(value):]
            elif kind == "ok":
                return value
            else:  # "raised": the call's exception, as it was raised there
                raise value

    def _died(self, stages: list[str]) -> ChildDied:
        self._proc.join(timeout=5)
        code = self._proc.exitcode
        self._forget()
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        return ChildDied(f"{stages[-1] if stages else 'the call'}: the process running it {how}")

    def _start(self) -> None:
        import multiprocessing as mp

        method = "spawn"
        if "fork" in mp.get_all_start_methods():
            try:
                import torch  # loaded before the fork, so the child starts with it
            except ImportError:
                method = "fork"
            else:
                method = "spawn" if torch.cuda.is_initialized() else "fork"  # a forked child cannot use CUDA
        ctx = mp.get_context(method)
        parent_end, child_end = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(child_end,), daemon=True, name="mucutlass-problem-calls")
        self._proc.start()
        child_end.close()
        self._conn = parent_end

    def _kill(self) -> None:
        self._proc.kill()
        self._proc.join(timeout=5)
        self._forget()

    def _forget(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            self._conn.send(None)
            self._proc.join(timeout=5)
        except (OSError, ValueError):
            pass
        if self._proc.is_alive():
            self._kill()
        else:
            self._forget()


class ChildDied(RuntimeError):
    """The child process running a call ended without an answer (a crash, ``os._exit``); one line."""


def _child_main(conn) -> None:
    """The child's loop: each request is ``(fn, args)``; the answer ``("ok", result)`` or ``("raised", exc)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops this process
    os.dup2(2, 1)  # what problem code prints goes to stderr, so a command's JSON on stdout stays clean
    sys.stdout = sys.stderr
    _deadlines.clear()
    _reporter[:] = [conn.send]
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        fn, args = request
        try:
            answer = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - problem code may raise anything, SystemExit included
            answer = ("raised", exc)
        try:
            conn.send(answer)
        except Exception as exc:  # noqa: BLE001 - an answer that does not pickle: its one line travels instead
            text = " ".join(str(answer[1] if answer[0] == "raised" else exc).split())
            conn.send(("raised", RuntimeError(f"{type(answer[1]).__name__}: {text}" if answer[0] == "raised" else
                                              f"the call's result cannot be sent back ({text})")))
