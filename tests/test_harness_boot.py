"""A candidate process that dies before it was sent anything of the candidate's is the harness's failure:
the judge starts one more fresh process, and only a second death (or any death once the candidate is
loaded, or any other finding) counts against the attempt."""
from __future__ import annotations

import pytest
import torch

from evals.judge import wire, verdicts
from evals.judge.process import Attempt, Finding, Judge


class FakeProc:
    """A candidate process seen through the judge's calls: dies at its first request, or answers."""

    sandboxed = True

    def __init__(self, dies: bool, error_rule: str = "crash"):
        self.dies, self.error_rule = dies, error_rule
        self.finished, self.requests = False, []

    def request(self, op, payload, timeout_s, max_stream_bytes=0):
        self.requests.append(op)
        if self.dies:
            raise wire.ChannelError(self.error_rule, f"the candidate process died during {op!r} (exit code 1)")
        return {"ok": True, "result": {"pid": id(self)}, "handler_s": 0.0}

    def supervisor_report(self, timeout_s=None):
        return {}

    def supervisor_stopped(self):
        return False

    def finish(self):
        self.finished = True


@pytest.fixture
def judge(monkeypatch):
    j = Judge()
    queue: list[FakeProc] = []
    monkeypatch.setattr(j, "take_spare", lambda: queue.pop(0))
    return j, queue


def attempt_on(j: Judge, proc: FakeProc) -> Attempt:
    return Attempt(j, proc, "digest", torch.device("cpu"), watchdog_s=5.0)


def test_a_process_dead_before_the_candidate_is_replaced_once(judge):
    j, queue = judge
    first, second = FakeProc(dies=True), FakeProc(dies=False)
    queue.append(second)
    attempt = attempt_on(j, first)
    info = j.boot(attempt, 5.0)
    assert info["pid"] == id(second) and attempt.proc is second
    assert first.finished and not second.finished and queue == []


def test_a_second_death_counts_against_the_attempt(judge):
    j, queue = judge
    queue.append(FakeProc(dies=True))
    attempt = attempt_on(j, FakeProc(dies=True))
    with pytest.raises(Finding) as err:
        j.boot(attempt, 5.0)
    assert err.value.rule == verdicts.CRASH and err.value.died


def test_no_second_process_once_the_candidate_is_loaded(judge):
    j, queue = judge
    queue.append(FakeProc(dies=False))
    attempt = attempt_on(j, FakeProc(dies=True))
    attempt.loaded = True
    with pytest.raises(Finding):
        j.boot(attempt, 5.0)
    assert len(queue) == 1, "a loaded candidate's death was blamed on the harness"


def test_a_channel_violation_is_not_a_death_and_is_not_retried(judge):
    j, queue = judge
    queue.append(FakeProc(dies=False))
    attempt = attempt_on(j, FakeProc(dies=True, error_rule="channel"))
    with pytest.raises(Finding) as err:
        j.boot(attempt, 5.0)
    assert err.value.rule == "channel" and len(queue) == 1
