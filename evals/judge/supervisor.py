"""The candidate process's supervisor: a small process (no torch) between the judge and the candidate.

    python -P -m evals.judge.supervisor --rss-limit-bytes N [--sandbox] -- python -P -m evals.judge.candidate --fd 3

It marks itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every process the candidate
starts, including double-forked daemons and ones in a new session, stays its descendant; it dies
with the judge (``PR_SET_PDEATHSIG``). It polls the resident memory of the whole tree (RLIMIT_AS
breaks CUDA's address-space reservations) and kills the tree past the limit. When the candidate
exits, or the judge writes ``kill`` or closes its stdin, every descendant is killed and reaped.

On stdout (to the judge) it writes one JSON line per event: ``report`` (answering ``report``) and
``exit``; each says how many descendants escaped the candidate's session or were orphaned to the
supervisor (a detached process), the tree's peak RSS, and whether the memory limit was hit.

It and the candidate make themselves undumpable first thing (``PR_SET_DUMPABLE`` 0): no process of
the same user reads or writes their memory or environment through /proc/<pid>/mem, environ or
ptrace. With ``--sandbox`` (where the kernel lets this process make namespaces: root, or unprivileged
user namespaces) the candidate starts as the first process of its own PID namespace, in its own
mount namespace where every file system is read-only except its folder, /dev and a private
/dev/shm, under a fresh /proc that shows only its own processes, in its own session, without
CAP_SYS_ADMIN / CAP_SYS_PTRACE / CAP_SYS_MODULE / CAP_SYS_RAWIO / CAP_MKNOD in its bounding set. It
then cannot see, signal or write into any process outside, nor write any file but its own; when it
ends, the kernel ends every process left in its namespace.
"""

from __future__ import annotations

if __name__ == "__main__":  # before anything else: undumpable while the rest of the start-up runs
    import ctypes as _ctypes

    _ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4

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
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
CAP_SETPCAP, CAP_NET_ADMIN, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_CHROOT, CAP_SYS_PTRACE = 8, 12, 16, 17, 18, 19
CAP_SYS_ADMIN, CAP_SYS_BOOT, CAP_MKNOD, CAP_PERFMON, CAP_BPF = 21, 22, 27, 38, 39
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
# flags a remount must keep (in a user namespace they are locked: changing one is refused)
_MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048,
                "relatime": 1 << 21, "strictatime": 1 << 24}
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _prctl(option: int, value: int) -> bool:
    try:
        return _libc().prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _drop_ptrace() -> None:
    """In the candidate before exec: the capabilities that read another process of the user (its memory,
    maps, environ: CAP_SYS_PTRACE, and CAP_SYS_ADMIN / CAP_PERFMON, which grant ptrace's read mode;
    CAP_BPF) leave the bounding set, so even as root it cannot read an undumpable process (the judge, the
    spares). Without CAP_SETPCAP this fails quietly (docs/harness.md)."""
    for cap in (CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF):
        _prctl(PR_CAPBSET_DROP, cap)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = (lambda v: v.encode() if isinstance(v, str) else v)
    _check(_libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _mounts() -> list[tuple[str, int]]:
    """(mount point, its nosuid/nodev/noexec/atime flags) of every mount this process sees, parents first."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            point = parts[4].encode().decode("unicode_escape")  # \040 for a space
            flags = 0
            for opt in parts[5].split(","):
                flags |= _MOUNT_FLAGS.get(opt, 0)
            out.append((point, flags))
    return out


def enter_pid_namespace() -> bool:
    """The next process this one starts is the first of a new PID namespace (this one stays outside)."""
    if os.getuid() != 0:  # an unprivileged user needs its own user namespace first
        uid, gid = os.getuid(), os.getgid()
        if _libc().unshare(CLONE_NEWUSER) != 0:
            return False
        # an undumpable process's /proc/self files belong to root, so its user cannot write its own id maps:
        # dumpable for these three writes only (this process holds no secret, and runs no code of anyone's)
        _prctl(PR_SET_DUMPABLE, 1)
        try:  # the same ids inside, so files keep their owners
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"{gid} {gid} 1")
        except OSError:
            return False
        finally:
            _prctl(PR_SET_DUMPABLE, 0)
    return _libc().unshare(CLONE_NEWPID) == 0


def enter_sandbox(workdir: str, writable: tuple[str, ...] = ()) -> None:
    """In the candidate before exec (the first process of the new PID namespace): its own mount
    namespace with every file system read-only but ``workdir`` (and ``writable``) and /dev, a private
    /dev/shm, a /proc of its own namespace, and the bounding set without the capabilities that would
    undo any of it. Raises OSError when the kernel refuses a step (the judge then runs candidates
    without it)."""
    _check(_libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the judge's namespace
    mounts = _mounts()
    for path in (workdir, *writable):  # its own folder stays writable
        if os.path.isdir(path):
            _mount(path, path, None, MS_BIND)
    for point, flags in mounts:
        if point == "/dev" or point.startswith(("/proc", "/dev/pts", "/dev/shm")):
            continue
        _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for cap in (CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_MKNOD, CAP_SYS_CHROOT, CAP_SYS_BOOT, CAP_NET_ADMIN):
        _prctl(PR_CAPBSET_DROP, cap)  # fails quietly without CAP_SETPCAP (a user namespace drops them at exec)


def cuda_usable() -> bool | None:
    """Whether this process can open the first CUDA device and allocate on it through the driver API
    (None where there is no CUDA driver). Run in a child: a process that initialised CUDA must not fork."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count, dev, ctx, ptr = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_void_p(), ctypes.c_uint64(0)
    steps = (lambda: cuda.cuInit(0), lambda: cuda.cuDeviceGetCount(ctypes.byref(count)),
             lambda: 0 if count.value > 0 else 100, lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0),
             lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), lambda: cuda.cuCtxSetCurrent(ctx),
             lambda: cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)), lambda: cuda.cuMemFree_v2(ptr))
    return all(step() == 0 for step in steps)


def _child_status(fn) -> int:
    """Exit code of a forked child that runs ``fn`` (0 when it returns true, 2 when it returns None)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = fn()
            code = 2 if ok is None else (0 if ok else 1)
        except BaseException:  # noqa: BLE001 - any failure is a no
            code = 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def probe_sandbox() -> bool:
    """Whether this kernel lets a process build the candidate's sandbox (a child tries it, then exits),
    and, on a host whose processes can use a GPU, whether a process inside it still can: a sandbox that
    took the GPU away would fail every candidate, so the judge then runs them without it."""
    def sandboxed() -> bool:
        enter_sandbox(os.getcwd())
        return cuda_usable() is not False

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if enter_pid_namespace():
                inner = os.fork()
                if inner == 0:
                    try:
                        os._exit(0 if sandboxed() else 1)
                    except BaseException:  # noqa: BLE001 - any failure means no sandbox
                        os._exit(1)
                code = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
        finally:
            os._exit(code)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0:
        return True
    # refused: only a sandbox that failed where the GPU works outside it is the sandbox's fault; either
    # way the answer is no, but say which on stderr for the judge's log
    if _child_status(cuda_usable) == 0:
        print("mucutlass: the candidate sandbox loses the GPU here; candidates run without it", file=sys.stderr)
    return False


def _stat_fields(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, session id) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = text.rsplit(")", 1)[-1].split()
    try:
        return rest[0], int(rest[1]), int(rest[3])
    except (IndexError, ValueError):
        return None


def stopped(pid: int) -> bool:
    """Whether a process is stopped by a signal (SIGSTOP, SIGTSTP): a stopped watcher polls nothing."""
    st = _stat_fields(pid)
    return st is not None and st[0] == "T"


def _rss_bytes(pid: int) -> int:
    """The memory a process holds of its own: anonymous pages and shared memory (its arena, any memfd or
    /dev/shm it makes), not the pages of the libraries it maps (CUDA's alone are a gigabyte or more, shared
    with every process that loads them and dropped by the kernel when memory is short)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("RssAnon", "RssShmem")))
        if fields:
            return sum(int(v.split()[0]) for v in fields.values()) * 1024
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def process_tree(root: int) -> dict[int, tuple[str, int, int]]:
    """Every live process below ``root``: pid -> (state, ppid, sid), each /proc/<pid>/stat read once."""
    table: dict[int, tuple[str, int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat_fields(int(name))
            if st is not None:
                table[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, stack = {}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in out:
                out[child] = table[child]
                stack.append(child)
    return out


def descendants(root: int) -> dict[int, tuple[int, int]]:
    """Every live process below ``root``: pid -> (ppid, sid)."""
    return {pid: (ppid, sid) for pid, (_, ppid, sid) in process_tree(root).items()}


def kill_descendants(root: int, rounds: int, pause_s: float, between=None) -> int:
    """SIGKILL every process below ``root``, again (``rounds`` at most, ``between()`` and a pause after
    each) until none is left: a process forking meanwhile leaves new ones. Returns how many were killed."""
    killed = set()
    for _ in range(rounds):
        tree = descendants(root)
        if not tree:
            break
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if between is not None:
            between()
        time.sleep(pause_s)
    return len(killed)


def keep_only_bounding_capabilities() -> None:
    """In a candidate forked without exec: its effective, permitted, inheritable and ambient sets cut to the
    bounding set, as an exec would (a root process keeps CAP_SYS_PTRACE in its effective set after the bounding
    set loses it until it execs: it could then still write another process's memory). Raises OSError when the
    kernel refuses."""
    libc = _libc()
    _prctl(47, 4)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}: capabilities 0-31, 32-63
    _check(libc.capget(header, data), "capget")
    for cap in range(64):
        if libc.prctl(23, cap, 0, 0, 0) == 0:  # PR_CAPBSET_READ: not in the bounding set (or unknown here)
            word, bit = divmod(cap, 32)
            for field_ in range(3):
                data[word * 3 + field_] &= ~(1 << bit) & 0xFFFFFFFF
    _check(libc.capset(header, data), "capset")


def exit_forked(fn) -> None:
    """The end of a forked child: ``fn()``'s code as its exit status (1 where it raised, with the traceback on
    stderr), its output flushed, and no return into the code of the process it was forked from."""
    code = 1
    try:
        code = fn()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child ends here whatever happened
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


class ForkedChild:
    """The candidate process as ``Popen`` shows it, for one forked from this process (``fork_entry``): it runs the
    candidate's entry in this process's image instead of exec'ing a new Python (evals.judge.zygote)."""

    def __init__(self, cmd: list[str], entry, pass_fds: tuple[int, ...], setup) -> None:
        self.returncode: int | None = None
        in_session_r, in_session_w = os.pipe()  # closed by the child once in its own session (Popen returns then too)
        self.pid = os.fork()
        if self.pid == 0:  # what Popen(stdin=DEVNULL, stdout=our stderr, close_fds, start_new_session) does
            def child() -> int:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the supervisor's handler is not the candidate's
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(2, 1)
                os.setsid()
                os.close(in_session_w)
                os.close(in_session_r)
                setup()
                keep_only_bounding_capabilities()
                keep = {0, 1, 2, *pass_fds}
                for fd in [int(f) for f in os.listdir("/proc/self/fd")]:
                    if fd not in keep:
                        try:
                            os.close(fd)
                        except OSError:
                            pass
                return int(entry(cmd) or 0)

            exit_forked(child)
        os.close(in_session_w)
        os.read(in_session_r, 1)  # EOF: the child's session is its own (or it died), so its sid is the one to record
        os.close(in_session_r)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by Supervisor.reap, which set the code
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class Supervisor:
    def __init__(self, cmd: list[str], rss_limit_bytes: int, pass_fds: tuple[int, ...], sandbox_dir: str = "",
                 writable: tuple[str, ...] = (), fork_entry=None):
        self.me = os.getpid()
        self.sandboxed = bool(sandbox_dir)
        if self.sandboxed and not enter_pid_namespace():
            raise OSError("the kernel refused a new PID namespace")

        def setup() -> None:
            if self.sandboxed:
                enter_sandbox(sandbox_dir, writable)
            _drop_ptrace()
            _prctl(PR_CAPBSET_DROP, CAP_SETPCAP)  # last: nothing it starts can drop or regain one

        # stdout is the judge's status pipe: the candidate writes to the log (our stderr) instead; its own
        # session, so that a signal to its process group (kill(0, ...)) reaches none of the harness's processes
        if fork_entry is not None:
            self.child = ForkedChild(cmd, fork_entry, pass_fds, setup)
        else:
            self.child = subprocess.Popen(cmd, pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                                          stdout=sys.stderr.fileno(), preexec_fn=setup, start_new_session=True)
        self.child_sid = os.getsid(self.child.pid)
        self.rss_limit_bytes = rss_limit_bytes
        self.peak_rss_bytes = 0
        self.memory_limit_hit = False
        self.escaped: set[int] = set()  # pids seen outside the candidate's session or orphaned to us
        self.stopped: set[int] = set()  # pids of the tree seen stopped by a signal

    def scan(self) -> None:
        """One poll: stopped processes, escaped ones (killed at once) and the tree's resident memory."""
        tree = process_tree(self.me)
        self.stopped |= {pid for pid, (state, _, _) in tree.items() if state == "T"}
        for pid, (_, ppid, sid) in tree.items():
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

    def kill_tree(self) -> int:
        """SIGKILL every descendant until none is left; returns how many were killed."""
        killed = kill_descendants(self.me, rounds=50, pause_s=0.01, between=self.reap)
        self.reap()
        return killed

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
                "memory_limit_hit": self.memory_limit_hit, "stopped": len(self.stopped), "sandboxed": self.sandboxed,
                **extra}


def main(argv=None, fork_entry=None) -> int:
    """``fork_entry``: run the candidate as ``fork_entry(cmd)`` in a fork of this process instead of exec'ing
    ``cmd`` (a supervisor forked from evals.judge.zygote, where torch is already imported)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rss-limit-bytes", type=int, default=0)
    ap.add_argument("--poll-s", type=float, default=0.05)
    ap.add_argument("--pass-fd", type=int, action="append", default=[])
    ap.add_argument("--workdir", default="", help="the candidate's folder, removed when it ends")
    ap.add_argument("--sandbox", action="store_true", help="namespaces: the candidate writes only its folder")
    ap.add_argument("--writable", action="append", default=[], help="a folder that stays writable in the sandbox")
    ap.add_argument("--probe", action="store_true", help="exit 0 when the sandbox can be built here")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.probe:
        return 0 if probe_sandbox() else 1
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    # the judge gone (killed too): end the tree and remove the candidate's folder, then exit
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the judge died before the death signal was set
        return 1
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        sup = Supervisor(cmd, args.rss_limit_bytes, tuple(args.pass_fd), args.workdir if args.sandbox else "",
                         tuple(args.writable), fork_entry=fork_entry)
    except (OSError, subprocess.SubprocessError) as exc:  # the kernel refused a step of the sandbox
        sys.stdout.write(json.dumps({"event": "exit", "reason": "sandbox_failed", "error": str(exc)[:200]}) + "\n")
        sys.stdout.flush()
        return 2
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
        if sup.stopped:  # a candidate that freezes processes of its tree: ended at once
            reason = "stopped"
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
                if line.startswith("limit "):  # the judge sets the attempt's limit once it knows the problem
                    try:
                        sup.rss_limit_bytes = max(0, int(line.split()[1]))
                    except (IndexError, ValueError):
                        pass
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
