"""Kill a run mid-way, resume it from its checkpoints: the same attempts and result as a run that
was never interrupted, and no finished attempt is redone."""

from __future__ import annotations

import hashlib
import json
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
from test_graph_cli import FUSED as SMOKE_PROGRAM  # a correct program for the smoke Linear + ReLU
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


# -- a run folder is data: nothing in it chooses code to run or where a key is sent -----------------------------------

ROOT = Path(__file__).resolve().parent.parent
SMOKE_PROBLEM = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"


def killed_run(tmp_path: Path) -> tuple[Path, Path]:
    """A run of a copy of the smoke problem, killed while its first program was being written: (run, problem)."""
    problem = tmp_path / "problem.py"
    problem.write_text(SMOKE_PROBLEM.read_text())
    progs = tmp_path / "progs"
    progs.mkdir()
    (progs / "01.mcu").write_text(SMOKE_PROGRAM)
    run = tmp_path / "run"
    tier = CountingPlayback(progs, kill_at=1)
    with pytest.raises(KeyboardInterrupt):
        run_optimize(problem, RunContext(tier=f"playback:{progs}", policy="fixed", max_attempts=1,
                                         backend="interpreter", tier_impl=tier, services=TextTrackingServices(),
                                         run_id="k"), run)
    return run, problem


def planted_problem(tmp_path: Path) -> tuple[Path, Path]:
    """A working problem whose import leaves a marker: (the problem, the marker)."""
    marker = tmp_path / "imported"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').close()\n" + SMOKE_PROBLEM.read_text())
    return evil, marker


def resume_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full_env.pop("OPENAI_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "mucutlass", "resume", *args], capture_output=True, text=True,
                          timeout=300, env=full_env, stdin=subprocess.DEVNULL)


def one_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def edit_record(run: Path, **changes) -> None:
    record = json.loads((run / "run.json").read_text())
    for key, value in changes.items():
        if key.startswith("settings_"):
            record["settings"][key.removeprefix("settings_")] = value
        else:
            record[key] = value
    (run / "run.json").write_text(json.dumps(record))


def test_a_checkpoint_naming_another_problem_is_refused_and_never_imported(tmp_path):
    from test_checkpoint_safety import plant

    run, _ = killed_run(tmp_path)
    evil, marker = planted_problem(tmp_path)
    plant(run, "problem_path", str(evil))
    error = one_error(resume_cli(str(run)))
    assert "checkpoints.sqlite" in error and "evil.py" in error and "--problem" in error
    assert not marker.exists(), "resume imported the problem the checkpoint named"


@pytest.mark.parametrize("forged", ["path", "path-and-hash"])
def test_a_run_json_naming_another_problem_is_refused_and_never_imported(tmp_path, forged):

    run, _ = killed_run(tmp_path)
    (run / "checkpoints.sqlite").unlink()  # run.json alone names the problem
    evil, marker = planted_problem(tmp_path)
    edit_record(run, problem_path=str(evil),
                **({"problem_sha256": hashlib.sha256(evil.read_bytes()).hexdigest()} if forged == "path-and-hash" else {}))
    error = one_error(resume_cli(str(run)))
    assert "run.json" in error and "--problem" in error
    assert not marker.exists(), "resume imported the problem run.json named"


@pytest.mark.parametrize("how", ["changed", "moved"])
def test_a_changed_or_moved_problem_resumes_only_when_named_again(tmp_path, how):
    run, problem = killed_run(tmp_path)
    if how == "changed":
        problem.write_text(problem.read_text() + "\n# edited after the run started\n")
        named = problem
    else:
        named = problem.rename(tmp_path / "moved.py")
    error = one_error(resume_cli(str(run)))
    assert ("changed since the run started" if how == "changed" else "gone") in error and "--problem" in error
    done = resume_cli(str(run), "--problem", str(named))
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((run / "run.json").read_text())

    assert record["problem_path"] == str(named.resolve())
    assert record["problem_sha256"] == hashlib.sha256(named.read_bytes()).hexdigest()
    assert json.loads((run / "summary.json").read_text())["attempts"] == 1
    assert resume_cli(str(run)).returncode == 0  # recorded afresh: the next resume needs no name


@pytest.mark.parametrize("tier", ["its-own", "gpt-5-mini"])
def test_run_json_never_chooses_an_endpoint_or_a_key(tmp_path, tier):
    """run.json names a tiers file whose tier sends the value of an environment variable of the folder's choosing
    to an endpoint of its choosing; resume looks the tier's name up in the user's configuration only."""
    from mock_servers import MockOpenAI

    run, _ = killed_run(tmp_path)
    secret = "s3cret-value-of-the-users"
    with MockOpenAI([f"```mcu\n{SMOKE_PROGRAM}```"]) as server:
        tiers = tmp_path / "folder-tiers.toml"
        tiers.write_text(f'[tiers.{tier}]\nmodel = "m"\nbase_url = "{server.url}/v1"\n'
                         'api_key_env = "USERS_SECRET"\nmax_retries = 0\ntimeout_s = 10\n')
        edit_record(run, tier=tier, settings_tier=tier, settings_tiers_file=str(tiers),
                    tiers={tier: {"base_url": f"{server.url}/v1", "api_key_env": "USERS_SECRET"}})
        done = resume_cli(str(run), env={"USERS_SECRET": secret})
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert not server.requests, f"a request reached the folder's endpoint: {server.requests[0]['auth']}"
    if tier == "its-own":
        error = one_error(done)
        assert "tier 'its-own'" in error and "--tiers-file" in error


def test_resume_warns_when_the_users_definition_of_the_tier_changed(tmp_path):
    tiers = tmp_path / "tiers.toml"
    tiers.write_text('[tiers.mine]\nkind = "offline"\n')
    run = tmp_path / "run"
    run_optimize(write_problem(tmp_path), RunContext(tier="mine", tiers_file=str(tiers), policy="fixed", max_attempts=1,
                                                     tier_impl=CountingPlayback(programs_dir(tmp_path)),
                                                     services=TextTrackingServices()), run)
    record = json.loads((run / "run.json").read_text())
    assert record["tier"] == "mine" and record["tier_identity"] and "tiers_file" not in record["settings"]

    def warnings_of_a_resume() -> list[str]:
        events = []
        resume_run(run, on_event=events.append, tiers_file=str(tiers), services=TextTrackingServices())
        return [e["message"] for e in events if e["event"] == "warning"]

    assert warnings_of_a_resume() == []
    tiers.write_text('[tiers.mine]\nkind = "offline"\ntimeout_s = 5\n')
    assert warnings_of_a_resume() == ["tier 'mine' is configured differently now than when this run started; its "
                                      "remaining attempts use today's configuration"]
