"""The candidate process's supervisor: a small process (no torch) between the judge and the candidate.

    python -P -m evals.supervisor --rss-limit-bytes N -- python -P -m evals.candidate_runner --fd 3

It marks itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every process the candidate
starts, including double-forked daemons and ones in a new session, stays its descendant; it dies
with the judge (``PR_SET_PDEATHSIG``). It polls the resident memory of the whole tree (RLIMIT_AS
breaks CUDA's address-space reservations) and kills the tree past the limit. When the candidate
exits, or the judge writes ``kill`` or closes its stdin, every descendant is killed and reaped.

On stdout (to the judge) it writes one JSON line per event: ``report`` (answering ``report``) and
``exit``; each says how many descendants escaped the candidate's session or were orphaned to the
supervisor (a detached process), the tree's peak RSS, and whether the memory limit was hit.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
CAP_SYS_PTRACE = 19


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _drop_ptrace() -> None:
    """In the candidate before exec: CAP_SYS_PTRACE leaves the bounding set, so even as root it cannot
    read an undumpable process (the judge) through /proc/<pid>/mem. Without CAP_SETPCAP this fails
    quietly (docs/harness.md)."""
    _prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE)


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, session id) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = text.rsplit(")", 1)[-1].split()
    try:
        return int(rest[1]), int(rest[3])
    except (IndexError, ValueError):
        return None


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def descendants(root: int) -> dict[int, tuple[int, int]]:
    """Every live process below ``root``: pid -> (ppid, sid)."""
    table: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                table[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, stack = {}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in out:
                out[child] = table[child]
                stack.append(child)
    return out


class Supervisor:
    def __init__(self, cmd: list[str], rss_limit_bytes: int, pass_fds: tuple[int, ...]):
        self.me = os.getpid()
        # stdout is the judge's status pipe: the candidate writes to the log (our stderr) instead
        self.child = subprocess.Popen(cmd, pass_fds=pass_fds, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
                                      preexec_fn=_drop_ptrace)
        self.child_sid = os.getsid(self.child.pid)
        self.rss_limit_bytes = rss_limit_bytes
        self.peak_rss_bytes = 0
        self.memory_limit_hit = False
        self.escaped: set[int] = set()  # pids seen outside the candidate's session or orphaned to us

    def scan(self) -> dict[int, tuple[int, int]]:
        tree = descendants(self.me)
        for pid, (ppid, sid) in tree.items():
            if pid == self.child.pid:
                continue
            if sid != self.child_sid or ppid == self.me:
                self.escaped.add(pid)
                # ended at once, not at the attempt's end: a daemon must not act while the attempt runs
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        rss = sum(_rss_bytes(pid) for pid in tree)
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        if self.rss_limit_bytes and rss > self.rss_limit_bytes:
            self.memory_limit_hit = True
        return tree

    def kill_tree(self) -> int:
        """SIGKILL every descendant until none is left; returns how many were killed."""
        killed = set()
        for _ in range(50):
            tree = descendants(self.me)
            if not tree:
                break
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            self.reap()
            time.sleep(0.01)
        self.reap()
        return len(killed)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child.pid:
                self.child.returncode = os.waitstatus_to_exitcode(status)

    def state(self, event: str, **extra) -> dict:
        return {"event": event, "escaped": len(self.escaped), "peak_rss_bytes": self.peak_rss_bytes,
                "memory_limit_hit": self.memory_limit_hit, **extra}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rss-limit-bytes", type=int, default=0)
    ap.add_argument("--poll-s", type=float, default=0.05)
    ap.add_argument("--pass-fd", type=int, action="append", default=[])
    ap.add_argument("--workdir", default="", help="the candidate's folder, removed when it ends")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    # the judge gone (killed too): end the tree and remove the candidate's folder, then exit
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the judge died before the death signal was set
        return 1
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    sup = Supervisor(cmd, args.rss_limit_bytes, tuple(args.pass_fd))
    for fd in args.pass_fd:
        os.close(fd)  # only the candidate holds the channel
    out = sys.stdout
    stdin_open = True
    reason = "exited"
    while True:
        if stop["now"]:
            reason = "judge_gone"
            break
        sup.reap()
        if sup.child.poll() is not None:
            break
        sup.scan()
        if sup.memory_limit_hit:
            reason = "memory_limit"
            break
        if stdin_open:
            ready, _, _ = select.select([sys.stdin], [], [], args.poll_s)
            if ready:
                line = sys.stdin.readline()
                if not line:
                    stdin_open = False
                    reason = "judge_closed"
                    break
                if line.strip() == "kill":
                    reason = "killed"
                    break
                if line.strip() == "report":
                    out.write(json.dumps(sup.state("report")) + "\n")
                    out.flush()
        else:
            time.sleep(args.poll_s)
    sup.scan()
    left = len(descendants(sup.me)) - (1 if sup.child.poll() is None else 0)
    killed = sup.kill_tree()
    code = sup.child.poll()
    if args.workdir:
        shutil.rmtree(args.workdir, ignore_errors=True)
    try:
        out.write(json.dumps(sup.state("exit", reason=reason, code=code, left_alive=max(left, 0), killed=killed)) + "\n")
        out.flush()
    except OSError:  # the judge is gone
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
