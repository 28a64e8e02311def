"""A judge on the CPU for the tests that need one running."""

from __future__ import annotations

import pytest


def cpu_harness(tmp_path_factory, **settings):
    """A judge on the CPU whose protected caches are the test's own, not the user's (a generator for a
    module-scoped fixture: the worker starts at once, with that environment)."""
    from evals.judge.client import Harness, HarnessSettings

    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        mp.setenv("MUCUTLASS_CACHE_DIR", str(cache / "kernels"))
        h = Harness(HarnessSettings(device="cpu", watchdog_s=60, **settings))
        h.worker_info()
        yield h
        h.close()
