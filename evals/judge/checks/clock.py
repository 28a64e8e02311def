"""The judge's own clock over the timed calls: back-to-back calls cannot take less wall time than their GPU
time, and all streams' time must not exceed the current stream's (work on a stream the caller does not
wait for)."""

from __future__ import annotations

import math
import time

from evals.judge import verdicts
from evals.judge.findings import Finding

WALL_TARGET_US = 20_000.0  # the back-to-back wall request spans about this much of the candidate's reported time
WALL_REPEATS = 3  # back-to-back wall requests at most before a GPU time is flagged as under the judge's clock


def wall_bound(p) -> None:
    """Up to ``WALL_REPEATS`` requests, the least disturbed one judged: another process's work on the host or
    the GPU can only lengthen a request, never shorten it. Enough calls to span ``WALL_TARGET_US`` (a ping's
    jitter spread thin), at least 10, at most 100."""
    res = p.res
    n_wall = max(10, min(int(res["trials"]), 100, math.ceil(WALL_TARGET_US / max(float(res["median_us"]), 1.0))))

    def under_wall(wall_us: float) -> bool:
        return res["median_us"] < 0.5 * wall_us - 20.0

    wall_us = math.inf
    for _ in range(WALL_REPEATS if p.device.type == "cuda" else 1):
        t0 = time.perf_counter()
        p.attempt.request("ping", {})
        ping_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        p.attempt.request("wall", {"n": n_wall})
        wall_us = min(wall_us, max(0.0, time.perf_counter() - t0 - ping_s) * 1e6 / n_wall)
        if not under_wall(wall_us):
            break
    res["wall_bound_us"] = wall_us
    if p.device.type == "cuda" and under_wall(wall_us):
        raise Finding(verdicts.TIMING_TAMPERED, f"reported GPU time {res['median_us']:.1f} us per call, but the "
                      f"judge's clock saw {wall_us:.1f} us per call back to back")


def current_stream(p) -> None:
    res = p.res
    cur = res.get("current_stream_median_us")
    if cur is not None and res["median_us"] > 1.5 * cur + 50.0:
        raise Finding(verdicts.TIMING_TAMPERED, f"the current stream's part of a call took {cur:.1f} us but all "
                      f"streams took {res['median_us']:.1f} us: work runs on a stream the caller does not wait for")
