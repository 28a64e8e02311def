"""The fork server: one process per judge with torch and the candidate runner imported, and nothing else, that
forks each new candidate process's supervisor (which forks the candidate) instead of a new Python importing torch.

    python -P -m evals.judge.zygote --fd N          # started by the judge (Zygote.start)

Importing torch costs seconds of CPU per process; a fork costs milliseconds. What a forked candidate process
starts from is the fork server's memory, which holds what a fresh process holds once it has imported the
runner: no candidate's code has run in it, nothing a candidate sent reaches it (its only channel is the judge's
socket), no CUDA context exists in it (checked before every fork: CUDA does not survive a fork, and a
context would be shared state), and it is undumpable from its first statement (as every harness process), so
no process of the user reads or writes its memory. Every fork is a new process with copy-on-write pages: what
one candidate changes in its own memory exists in no other process. docs/harness.md states the argument.

A request is one datagram on a ``SOCK_SEQPACKET`` pair: the supervisor's argv, environment and folder as
JSON, and the descriptors it gets (its stdin, stdout and stderr, then those it passes to the candidate) as
``SCM_RIGHTS``; the answer is the supervisor's pid and a pidfd (the judge's handle on a process that is not
its child). The fork server reaps its children; the judge sees their end through the pidfd.
"""

from __future__ import annotations

if __name__ == "__main__":  # before anything else: undumpable while the rest of the start-up runs
    import ctypes as _ctypes

    _ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

MAX_REQUEST_BYTES = 1 << 20
MAX_FDS = 16
READY_TIMEOUT_S = 120.0  # the fork server's own torch import, on a loaded host
SPAWN_TIMEOUT_S = 10.0  # a fork takes milliseconds; past this the server is stopped or wedged


class ZygoteError(Exception):
    """The fork server cannot start a process now (gone, stopped, not ready): the caller starts one by exec."""


class ForkedProcess:
    """A supervisor the fork server started, as ``subprocess.Popen`` shows it to the judge: its pipes, whether it
    ended (its pidfd: a pid of an ended process may be reused, a pidfd never names another one), a kill."""

    def __init__(self, pid: int, pidfd: int, stdin_w: int, stdout_r: int) -> None:
        self.pid, self.pidfd = pid, pidfd
        self.stdin = os.fdopen(stdin_w, "wb")
        self.stdout = os.fdopen(stdout_r, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.pidfd >= 0 and select.select([self.pidfd], [], [], 0)[0]:
            self._ended()
        return self.returncode

    def _ended(self) -> None:
        # its exit code is its parent's (the fork server's) to read; the supervisor reports its own ending
        self.returncode = 0
        os.close(self.pidfd)
        self.pidfd = -1

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("supervisor", timeout)
            self._ended()
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def communicate(self, timeout: float | None = None) -> tuple[bytes, None]:
        """Everything it still writes on stdout until it exits (the judge's stdin to it is closed first)."""
        try:
            self.stdin.close()
        except OSError:
            pass
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = []
        fd = self.stdout.fileno()
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("supervisor", timeout)
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        self.stdout.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return b"".join(chunks), None


class Zygote:
    """The judge's handle on its fork server: started once, asked for a process per candidate."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket, workdir: str) -> None:
        self.proc, self.sock, self.workdir = proc, sock, workdir
        self.ready = False
        self.error = ""  # why the server is not ready or refused the last fork (for the logs and the tests)

    @classmethod
    def start(cls, python: str = sys.executable) -> "Zygote":
        """Returns at once; the server imports torch in the background (``wait_ready``)."""
        from evals.judge.sandbox import candidate_env

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        workdir = tempfile.mkdtemp(prefix="mucutlass-zygote-")
        env = candidate_env(workdir=workdir)  # what a candidate's environment holds: no secret to inherit
        flags = ["-P", "-s"] if env.get("PYTHONNOUSERSITE") else ["-P"]
        try:
            proc = subprocess.Popen([python, *flags, "-m", "evals.judge.zygote", "--fd", str(theirs.fileno())],
                                    pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    cwd=workdir, env=env, start_new_session=True)
        finally:
            theirs.close()
        return cls(proc, mine, workdir)

    def alive(self) -> bool:
        from evals.judge.supervisor import stopped

        return self.proc.poll() is None and not stopped(self.proc.pid)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Whether the server has imported what a candidate process needs (False: gone or not within the time)."""
        if not self.ready and self.alive() and select.select([self.sock], [], [], timeout_s)[0]:
            try:
                reply = json.loads(self.sock.recv(MAX_REQUEST_BYTES) or b"{}")
                self.ready = reply.get("ready") is True
                self.error = "" if self.ready else str(reply.get("error") or "not ready")
            except (OSError, ValueError, AttributeError):
                self.ready, self.error = False, "no readable answer from the fork server"
        return self.ready and self.alive()

    def is_ready(self) -> bool:
        return self.wait_ready(0.0)

    def spawn(self, argv: list[str], env: dict, cwd: str, stdio: tuple[int, int, int],
              pass_fds: tuple[int, ...]) -> tuple[int, int]:
        """Fork a supervisor running ``evals.judge.supervisor`` with ``argv`` (its candidate forked as well) in
        ``cwd`` with ``env``; ``stdio`` becomes its descriptors 0-2 and each of ``pass_fds`` keeps its number.
        Returns (pid, pidfd); ZygoteError when the server cannot."""
        if not self.wait_ready(SPAWN_TIMEOUT_S):
            raise ZygoteError("the fork server is not ready")
        msg = json.dumps({"argv": argv, "env": env, "cwd": cwd, "fds": list(pass_fds)}).encode()
        try:
            socket.send_fds(self.sock, [msg], [*stdio, *pass_fds])
            if not select.select([self.sock], [], [], SPAWN_TIMEOUT_S)[0]:
                raise ZygoteError(f"no answer from the fork server within {SPAWN_TIMEOUT_S:g} s")
            data, fds, _, _ = socket.recv_fds(self.sock, MAX_REQUEST_BYTES, 1)
        except OSError as exc:
            raise ZygoteError(f"the fork server's channel failed: {exc}") from None
        reply = json.loads(data or b"{}")
        if not fds or "pid" not in reply:
            for fd in fds:
                os.close(fd)
            self.error = str(reply.get("error", "no answer"))
            raise ZygoteError(f"the fork server could not fork: {self.error}")
        return int(reply["pid"]), fds[0]

    def fork(self, cmd: list[str], env: dict, workdir: str, log_fd: int, fds: tuple[int, ...]) -> ForkedProcess | None:
        """The supervisor ``cmd`` (``python -m evals.judge.supervisor ...``) would start, forked instead, its stderr
        ``log_fd``; None where the server cannot now (the caller then execs ``cmd``)."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            pid, pidfd = self.spawn(cmd[cmd.index("evals.judge.supervisor") + 1:], env, workdir,
                                    (stdin_r, stdout_w, log_fd), fds)
        except ZygoteError:
            for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
                os.close(fd)
            return None
        os.close(stdin_r)
        os.close(stdout_w)
        return ForkedProcess(pid, pidfd, stdin_w, stdout_r)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)


# -- the fork server's process ---------------------------------------------------------------------------------
def shared_writable_mappings() -> list[str]:
    """This process's writable shared mappings: a fork keeps them shared with every other fork (a channel between
    candidates), an exec would not."""
    try:
        with open("/proc/self/maps") as f:
            return [line.strip() for line in f if len(line.split()) > 1 and line.split()[1][1] == "w"
                    and line.split()[1][3] == "s"]
    except OSError:
        return ["/proc/self/maps unreadable"]


def cuda_touched() -> str:
    """What of CUDA this process holds ("" when nothing: a fork of it then holds none): a context, or a GPU device
    file the driver opened (a device count asked of the CUDA runtime initialises the driver without a context)."""
    import torch

    if torch.cuda.is_initialized():
        return "a CUDA context"
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return "no list of its open files (/proc/self/fd)"
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            return f"the device file {target}"
    return ""


def cuda_untouched() -> bool:
    """Whether this process has no CUDA context and no GPU device open: a fork of it then holds none."""
    return not cuda_touched()


# what asks the driver for devices (and so initialises it) without creating a context
_DEVICE_PROBES = (("torch.cuda", "is_available"), ("torch.cuda", "device_count"), ("torch._C", "_cuda_getDeviceCount"))


@contextlib.contextmanager
def first_device_probe(found: list):
    """While inside: the first call of a device probe (``_DEVICE_PROBES``) appends where it came from to ``found``
    (its innermost frames outside torch), so a server that finds the driver initialised can say what did it; the
    originals are back on exit (a candidate's guards take them when it starts)."""
    import importlib
    import traceback

    saved = []
    for module_name, attr in _DEVICE_PROBES:
        owner = importlib.import_module(module_name)
        original = getattr(owner, attr, None)
        if original is None:
            continue

        def probe(*args, _original=original, _name=f"{module_name}.{attr}", **kwargs):
            if not found:
                frames = [f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename.replace(os.sep, "/")]
                found.append(f"{_name} called from " + " <- ".join(
                    f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(frames[-4:])))
            return _original(*args, **kwargs)

        saved.append((owner, attr, original))
        setattr(owner, attr, probe)
    try:
        yield found
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def _place_fds(received: list[int], targets: list[int]) -> None:
    """In a forked supervisor: the first three received descriptors become 0-2, the rest take the numbers
    ``targets`` names; every other descriptor (the fork server's channel among them) is closed."""
    import fcntl

    low = max([2, *targets]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, low) for fd in received]  # above every target: placing one clobbers none
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in moved:
            try:
                os.close(fd)
            except OSError:
                pass
    for fd, target in zip(moved, [0, 1, 2, *targets]):
        os.dup2(fd, target)
    for fd in moved:
        os.close(fd)


def _candidate_entry(cmd: list[str]) -> int:
    """The candidate process (the supervisor's fork): ``python -m evals.judge.candidate ARGS`` without the exec."""
    import ctypes

    from evals.judge import candidate

    if ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0) != 0:  # PR_GET_DUMPABLE: inherited from the server
        return 1
    args = cmd[cmd.index("evals.judge.candidate") + 1:]
    if "--armed-fd" in args[:-1]:  # undumpable from its first instruction: armed at once
        os.close(int(args[args.index("--armed-fd") + 1]))
    sys.argv = [candidate.__file__, *args]
    sys.modules["__main__"] = candidate  # as under `python -m`: the running runner is the process's main module
    if "numpy" in sys.modules:  # its global generator was seeded once in the server; a fresh process seeds its own
        sys.modules["numpy"].random.seed()
    return candidate.main(args)


def _supervise(request: dict, received: list[int]) -> None:
    """The forked supervisor: its descriptors, folder and environment as the judge asked, then its main loop."""
    from evals.judge import supervisor

    def run() -> int:
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        _place_fds(received, [int(t) for t in request["fds"]])
        sys.stdin = os.fdopen(0, "r", closefd=False)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # read from TMPDIR again
        return supervisor.main(list(request["argv"]), fork_entry=_candidate_entry)

    supervisor.exit_forked(run)


def _serve(sock: socket.socket) -> int:
    while True:
        ready, _, _ = select.select([sock], [], [], 1.0)
        while True:  # reap ended supervisors (their judge holds a pidfd, not a pid)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, MAX_FDS)
        except OSError:
            return 0
        if not data:
            return 0  # the judge closed the channel
        try:
            request = json.loads(data)
            touched = cuda_touched()
            if touched:
                raise RuntimeError(f"the fork server holds {touched}")
            if shared_writable_mappings():
                raise RuntimeError(f"the fork server holds shared writable memory: {shared_writable_mappings()[0]}")
            pid = os.fork()
            if pid == 0:
                _supervise(request, fds)
            pidfd = os.pidfd_open(pid)  # before any reap: it names this child and no later process
            try:
                socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
        except Exception as exc:  # noqa: BLE001 - a refused request is an answer, the server goes on
            try:
                sock.send(json.dumps({"error": str(exc)[:200]}).encode())
            except OSError:
                return 0
        finally:
            for fd in fds:
                os.close(fd)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--fd", type=int, required=True)
    args = ap.parse_args(argv)
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: ends with the judge
    sock = socket.socket(fileno=args.fd)
    if os.getppid() == 1:
        return 1
    probed: list[str] = []
    with first_device_probe(probed):
        # what every candidate process imports before it runs anything: torch and the runner, not their CUDA
        from evals.judge import candidate, supervisor, timing  # noqa: F401

        # the numerics every candidate process sets first (its runner sets them again): the first call imports
        # torch._dynamo and torch._inductor, seconds of CPU a fork then need not repeat
        timing.set_framework()
    if "" in sys.path:
        sys.path.remove("")
    touched = cuda_touched()
    if touched:
        why = f"importing the runner left {touched}" + (f" ({probed[0]})" if probed else "")
        sock.send(json.dumps({"ready": False, "error": why[:400]}).encode())
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    sock.send(json.dumps({"ready": True}).encode())
    return _serve(sock)


if __name__ == "__main__":
    sys.exit(main())
