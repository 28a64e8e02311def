"""Runs one adversarial case or control through the harness's public calls and says what happened.
Shared by tests/test_harness_adversarial.py (which asserts) and report.py (which writes a table)."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.adversarial.cases import FLAG_RULES, Case, Control, candidate_for, caught, problem_for, rejected, rule_of

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Fake keys in the judge's environment: a candidate must never see them.
SECRET_VARS = {"OPENAI_API_KEY": "sk-redteam-canary-0000", "MUCUTLASS_TEST_TOKEN": "tok-redteam-canary-0000"}
HOG_DEFAULT_BYTES = 3 << 30  # host memory the hog touches when the harness states no limit
DAEMON_WAIT_S = 2.0  # the daemon case writes its marker 1.5 s after it starts


def memory_limit_bytes(settings) -> int | None:
    """The judge's host memory limit for a candidate, from whichever settings field states one (a name
    with "mem" and "limit" or "max" in it; the unit from its suffix, bytes without one); where it is left to the
    problem's footprint, the floor the judge keeps for a small problem (evals.judge.memory)."""
    units = {"_bytes": 1, "_b": 1, "_kb": 1 << 10, "_kib": 1 << 10, "_mb": 1 << 20, "_mib": 1 << 20,
             "_gb": 1 << 30, "_gib": 1 << 30}
    fields = getattr(settings, "model_dump", lambda: {})()
    for name, value in fields.items():
        low = name.lower()
        if "mem" not in low or not ("limit" in low or "max" in low) or "gpu" in low or "device" in low:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            scale = next((u for suffix, u in units.items() if low.endswith(suffix)), 1)
            return int(value * scale)
    try:
        from evals.judge.memory import HOST_FLOOR_BYTES

        return HOST_FLOOR_BYTES
    except ImportError:
        return None


class Scratch:
    """What one case may touch: a folder the caller owns, a unique token, and the places a containment
    case plants things (removed by ``cleanup`` whatever happened)."""

    def __init__(self, root: Path, settings):
        self.dir = Path(root)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.token = uuid.uuid4().hex[:12]
        limit = memory_limit_bytes(settings)
        self.hog_bytes = limit + (1 << 30) if limit else HOG_DEFAULT_BYTES
        self.project_marker = PROJECT_ROOT / f".planted-{self.token}"
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        roots = [Path(xdg) / "mucutlass"]
        if os.environ.get("MUCUTLASS_CACHE_DIR"):
            roots.append(Path(os.environ["MUCUTLASS_CACHE_DIR"]))
        try:
            import platformdirs

            roots.append(Path(platformdirs.user_cache_dir("mucutlass")))
        except ImportError:
            pass
        self.cache_entries = {r / "kernels" / f"planted-{self.token}" for r in roots}
        # where plants_startup_hook.py and plants_compile_caches.py write (the default folders and
        # the ones the environment names, as the candidate computes them)
        import getpass
        import site
        import sysconfig
        import tempfile

        self.hook_files = {Path(d) / f"zz_redteam_{self.token}.pth"
                           for d in (sysconfig.get_paths()["purelib"], site.getusersitepackages())}
        home = Path(os.path.expanduser("~"))
        compile_roots = [Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}",
                         home / ".triton" / "cache", home / ".cache" / "torch_extensions", home / ".nv" / "ComputeCache"]
        compile_roots += [Path(os.environ[v]) for v in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                                                        "TORCH_EXTENSIONS_DIR") if os.environ.get(v)]
        self.compile_entries = {r / f"planted-{self.token}" for r in compile_roots}
        # where plants_sitecustomize.py writes: start-up modules in every folder of a candidate's import path
        # that has none (one that exists belongs to the host and is left alone)
        path = [*sys.path, *os.environ.get("PYTHONPATH", "").split(os.pathsep), str(PROJECT_ROOT)]
        self.startup_modules = {Path(d) / n for d in path if d and os.path.isdir(d)
                                for n in ("sitecustomize.py", "usercustomize.py") if not (Path(d) / n).exists()}

    @property
    def subs(self) -> dict[str, str]:
        return {"__REDTEAM_DIR__": str(self.dir), "__REDTEAM_TOKEN__": self.token, "__HOG_BYTES__": str(self.hog_bytes)}

    def daemon_pid(self) -> int | None:
        try:
            return int((self.dir / "daemon.pid").read_text())
        except (OSError, ValueError):
            return None

    def planted(self) -> list[str]:
        """What a containment case left where it must not write."""
        out = [str(self.project_marker)] if self.project_marker.exists() else []
        out += [str(m) for m in self.startup_modules if self._ours(m)]
        return out + [str(e) for e in (*self.cache_entries, *self.hook_files, *self.compile_entries) if e.exists()]

    def _ours(self, path: Path) -> bool:
        try:
            return self.token in path.read_text(errors="replace")
        except OSError:
            return False

    def cleanup(self) -> None:
        pid = self.daemon_pid()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)  # the daemon this case's candidate started, by its id
            except (ProcessLookupError, PermissionError):
                pass
        self.project_marker.unlink(missing_ok=True)
        for m in self.startup_modules:
            if self._ours(m):
                m.unlink(missing_ok=True)
        for f in self.hook_files:
            f.unlink(missing_ok=True)
        for entry in (*self.cache_entries, *self.compile_entries):
            for f in entry.glob("*"):
                f.unlink(missing_ok=True)
            try:
                entry.rmdir()
            except OSError:
                pass


@dataclass
class Outcome:
    """What the harness said about a case (or a control) and what was seen around it."""

    rule: str | None
    rejected: bool
    caught: bool
    reason: str
    flags: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # guarantees broken beside the verdict
    next_clean: bool | None = None
    next_reason: str = ""
    wall_s: float = 0.0


def judge_file(harness, file: str, problem, scratch: Scratch, stage: str):
    cand = candidate_for(file, problem, scratch.subs)
    return harness.profile(problem, cand) if stage == "profile" else harness.validate(problem, cand)


def stage_of(harness, case: Case, on_gpu: bool) -> str:
    """The call that judges ``case`` here: its stage on a GPU; on the CPU validate, except the timing cases
    (property 5) where the harness measures on the CPU (``cpu_timing``: sealed calls bound the time)."""
    if on_gpu:
        return case.stage
    cpu_timing = bool(getattr(harness.settings, "cpu_timing", False))
    return "profile" if case.stage == "profile" and case.prop == 5 and cpu_timing else "validate"


def run_case(harness, case: Case, on_gpu: bool, scratch: Scratch, check_next: bool = True) -> Outcome:
    """Judge the case (and its ``then`` partner) at its stage, check the guarantees around it, then
    judge the canary to see whether the next attempt starts clean."""
    problem = problem_for(case.problem, on_gpu)
    stage = stage_of(harness, case, on_gpu)
    t0 = time.perf_counter()
    try:
        result = judge_file(harness, case.file, problem, scratch, stage)
        if case.then:
            result = judge_file(harness, case.then, problem, scratch, stage)
        out = Outcome(rule=rule_of(result), rejected=rejected(result), caught=caught(result, case),
                      reason=result.reason or "", flags=list(result.flags))
        out.problems = _guarantees(case, scratch) + _time_guarantee(case, result, problem, on_gpu, stage)
        if case.guarantee:
            # The harm must not happen (a read cannot be seen, a write can be refused, a daemon
            # can be ended); a verdict, if there is one, must name the case's rule.
            # (a flag such as pytorch_only is no verdict on the harm: a PyTorch-only candidate is rightly flagged)
            out.caught = not out.problems and (out.rule is None or out.rule in case.rules or out.rule in FLAG_RULES)
        elif out.problems:
            out.caught = False
        out.wall_s = time.perf_counter() - t0
        if check_next:
            after = judge_file(harness, "canary.py", problem_for(case.problem, on_gpu), scratch, "validate")
            out.next_clean = not rejected(after) and rule_of(after) in (None, "pytorch_only")
            out.next_reason = after.reason or ""
        return out
    finally:
        scratch.cleanup()
        if case.taints:
            harness.close()  # today's worker keeps what was planted: the next case starts a fresh one


def _time_guarantee(case: Case, result, problem, on_gpu: bool, stage: str) -> list[str]:
    """For a case whose harm is a reported time below the work done (``case.honest_time``): the
    reported median must be at least half of the problem's FP32 speed of light on the H200's datasheet
    (the candidate computes in fp32 and the harness holds the framework at full precision)."""
    if not (case.honest_time and on_gpu and stage == "profile"):
        return []
    median = getattr(result, "median_us", None)
    if median is None:
        return []  # no time was reported: the verdict says why
    from sol_models.bounds import sol_report
    from sol_models.counting import count_problem
    from sol_models.hardware import get_gpu

    t_f32_us = sol_report(count_problem(problem), get_gpu("h200", calibrated=False)).per_precision["f32"].t_compute_us
    if median < 0.5 * t_f32_us:
        return [f"reported {median:.1f} us per call, under half the fp32 floor of its FLOPs ({t_f32_us:.1f} us)"]
    return []


def _guarantees(case: Case, scratch: Scratch) -> list[str]:
    problems = []
    if case.file in ("reads_secrets.py", "reads_ancestor_environ.py"):
        leaked = scratch.dir / "secrets.txt"
        text = leaked.read_text() if leaked.exists() else ""
        if any(v in text for v in SECRET_VARS.values()):
            problems.append("the candidate read the judge's secrets")
    if case.file in ("daemon_child.py", "freezes_supervisor.py"):
        time.sleep(DAEMON_WAIT_S)
        if (scratch.dir / "daemon.marker").exists():
            problems.append("a process the candidate started outlived the attempt")
    if case.file in ("writes_project.py", "writes_kernel_cache.py", "plants_startup_hook.py",
                     "plants_compile_caches.py", "writes_via_proc_root.py", "plants_sitecustomize.py",
                     "plants_nv_compute_cache.py"):
        left = scratch.planted()
        if left:
            problems.append(f"planted files remain: {', '.join(left)}")
    if case.file == "plants_next_attempt_env.py":
        report = scratch.dir / "next_attempt.txt"
        reached = [line for line in (report.read_text().splitlines() if report.exists() else [])
                   if line.strip().isdigit()]
        if reached:
            problems.append(f"the candidate wrote into the memory of the next attempts' processes {', '.join(reached)}")
    return problems


class _BesideWriter:
    """Another process's writes into the project while an attempt runs (a build, a recorder, an editor),
    stood in for by a thread of the test: it rewrites one file every 50 ms until stopped."""

    def __init__(self, path: Path):
        import threading

        self.path = path
        self.done = threading.Event()
        self.lost = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n, last = 0, None
        while not self.done.is_set():
            self._check(last)
            last = f"written by another process, {n}\n"
            self.path.write_text(last)
            n += 1
            self.done.wait(0.05)
        self._check(last)

    def _check(self, last: str | None) -> None:
        if last is not None and (not self.path.exists() or self.path.read_text() != last):
            self.lost = True  # removed or put back by someone else since our last write

    def stop(self) -> bool:
        """Stops writing; whether the file was never removed or reverted under it. The file is removed."""
        self.done.set()
        self.thread.join()
        kept = not self.lost and self.path.exists()
        self.path.unlink(missing_ok=True)
        return kept


def run_control(harness, control: Control, on_gpu: bool, scratch: Scratch) -> Outcome:
    """An honest control: correct, no hard rule, no flag beyond the ones its kind rightly carries;
    on a GPU also a valid timing."""
    p = problem_for(control.problem, on_gpu)
    t0 = time.perf_counter()
    beside = _BesideWriter(PROJECT_ROOT / f".beside-{scratch.token}") if control.file == "honest_beside_writer.py" else None
    try:
        v = judge_file(harness, control.file, p, scratch, "validate")
    finally:
        kept = beside.stop() if beside is not None else True
    rule = rule_of(v)
    problems = []
    if rejected(v):
        problems.append(f"rejected: {v.reason}")
    if rule is not None and rule not in control.flags_ok:
        problems.append(f"flagged {rule}")
    problems += [f"flag {f}" for f in v.flags if f.split(":", 1)[0] not in control.flags_ok]
    if not kept:
        problems.append("the judge deleted or reverted a file another process wrote into the project during the attempt")
    if on_gpu or getattr(harness.settings, "cpu_timing", False):
        t = judge_file(harness, control.file, p, scratch, "profile")
        if not t.valid or not t.median_us:
            problems.append(f"timing: {t.reason}")
        elif rule_of(t) not in (None, *control.flags_ok):
            problems.append(f"timing flagged {rule_of(t)}")
    scratch.cleanup()
    return Outcome(rule=rule, rejected=rejected(v), caught=not problems, reason="; ".join(problems) or v.reason,
                   flags=list(v.flags), problems=problems, wall_s=time.perf_counter() - t0)
