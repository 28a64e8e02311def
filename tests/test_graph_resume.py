"""Kill a run mid-way, resume it from its checkpoints: the same attempts and result as a run that
was never interrupted, and no finished attempt is redone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graph.context import RunContext
from graph.runner import RunError, resume_run, run_optimize
from nodes.playback import PlaybackTier
from test_graph_fakes import BROKEN, GOOD, SLOW, WRONG, TextTrackingServices, write_problem

PROGRAMS = [SLOW, BROKEN, WRONG, GOOD, SLOW]


class CountingPlayback(PlaybackTier):
    def __init__(self, source, kill_at=None):
        super().__init__(source)
        self.kill_at = kill_at
        self.written: list[int] = []

    def write(self, request):
        if request.attempt_index == self.kill_at:
            raise KeyboardInterrupt  # as if the process were interrupted while the model was writing
        self.written.append(request.attempt_index)
        return super().write(request)


def programs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "progs"
    d.mkdir(exist_ok=True)
    for i, text in enumerate(PROGRAMS):
        (d / f"{i:02d}.mcu").write_text(text)
    return d


def comparable(summary):
    drop = {"wall_s"}
    return ([a.model_dump(exclude=drop) for a in summary.attempts], summary.best_index, summary.best_t_us,
            summary.stop_reason)


def ctx(tier, **kw):
    return RunContext(tier="playback", policy="fixed", max_attempts=5, tier_impl=tier,
                      services=TextTrackingServices(), **kw)


def test_kill_then_resume_matches_an_uninterrupted_run(tmp_path):
    problem = write_problem(tmp_path)
    progs = programs_dir(tmp_path)
    straight = run_optimize(problem, ctx(CountingPlayback(progs)), tmp_path / "straight")

    killer = CountingPlayback(progs, kill_at=4)
    with pytest.raises(KeyboardInterrupt):
        run_optimize(problem, ctx(killer, run_id="r1"), tmp_path / "killed")
    assert killer.written == [1, 2, 3]
    assert not (tmp_path / "killed" / "summary.json").exists()

    again = CountingPlayback(progs)
    events = []
    resumed = resume_run(tmp_path / "killed", on_event=events.append, tier_impl=again, services=TextTrackingServices())
    assert again.written == [4, 5]  # finished attempts are not redone
    assert comparable(resumed) == comparable(straight)
    assert events[0]["resumed"] and events[0]["attempts_done"] == 3
    assert (tmp_path / "killed" / "summary.json").exists()


def test_resume_of_a_finished_run_changes_nothing(tmp_path):
    problem = write_problem(tmp_path)
    progs = programs_dir(tmp_path)
    first = run_optimize(problem, ctx(CountingPlayback(progs)), tmp_path / "run")
    tier = CountingPlayback(progs)
    second = resume_run(tmp_path / "run", tier_impl=tier, services=TextTrackingServices())
    assert tier.written == [] and comparable(second) == comparable(first)


def test_resume_needs_a_run_directory(tmp_path):
    with pytest.raises(RunError, match="not a run directory"):
        resume_run(tmp_path)


SCRIPT = textwrap.dedent('''
    import sys, time
    sys.path[:0] = [{root!r}, {tests!r}]
    from graph.context import RunContext
    from graph.runner import run_optimize, resume_run
    from nodes.playback import PlaybackTier
    from test_graph_fakes import TextTrackingServices

    written = []

    class Slow(PlaybackTier):
        def write(self, request):
            if request.attempt_index == 3 and {stall}:
                print("stalled", flush=True)
                time.sleep(60)
            written.append(request.attempt_index)
            return super().write(request)

    ctx = RunContext(tier="playback", policy="fixed", max_attempts=5, tier_impl=Slow({progs!r}),
                     services=TextTrackingServices(), run_id="k")
    if {resume}:
        s = resume_run({run_dir!r}, tier_impl=Slow({progs!r}), services=TextTrackingServices())
    else:
        s = run_optimize({problem!r}, ctx, {run_dir!r})
    print("written", written, flush=True)
    print("best", s.best_index, len(s.attempts), flush=True)
''')


def test_sigkill_then_resume(tmp_path):
    problem = write_problem(tmp_path)
    progs = programs_dir(tmp_path)
    run_dir = tmp_path / "run"
    root = str(Path(__file__).resolve().parent.parent)
    args = dict(root=root, tests=str(Path(__file__).resolve().parent), progs=str(progs), problem=str(problem),
                run_dir=str(run_dir))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(stall=True, resume=False, **args)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "stalled"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(stall=False, resume=True, **args)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-2:] == ["written [3, 4, 5]", "best 4 5"]  # 1 and 2 not redone
    import json

    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert [a["program_text"] for a in attempts] == PROGRAMS


def test_programs_travel_as_values_and_old_checkpoints_json_still_reads():
    from dsl_compiler.parser import parse
    from graph.state import program_of

    program, _ = parse((Path(__file__).resolve().parent.parent / "examples" / "mlp.mcu").read_text())
    assert program_of({"program": program}) is program
    assert program_of({"best_program_json": program.model_dump_json()}, "best_program") == program
    assert program_of({}) is None
