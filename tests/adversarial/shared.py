"""One CPU harness shared by the harness tests of a pytest session (a worker start imports
torch, which costs seconds on a small machine)."""

from __future__ import annotations

import atexit

from evals.judge.client import Harness, HarnessSettings

_HARNESSES: dict[tuple, Harness] = {}


def shared_harness(**settings) -> Harness:
    key = tuple(sorted(settings.items()))
    if key not in _HARNESSES:
        _HARNESSES[key] = Harness(HarnessSettings(**settings))
    return _HARNESSES[key]


@atexit.register
def _close_all() -> None:
    for h in _HARNESSES.values():
        h.close()
