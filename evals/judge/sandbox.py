"""The judge's side of a candidate process: start (ahead of need), request, contain, end.

    proc = CandidateProcess.start(settings)        # returns at once; torch imports in the background
    reply = proc.request("call", {...}, timeout_s)  # -> dict, or raises wire.ChannelError(rule, text)
    findings = proc.finish()                        # kills the tree; containment findings

The process runs ``evals.judge.candidate`` under ``evals.judge.supervisor`` (a child subreaper that kills
every descendant with it and polls the tree's memory), in an empty temporary directory that is not
on its import path, with keys and tokens removed from its environment and no descriptor but its
end of a dedicated socket. Its stdout and stderr go to a log; its compile caches (TorchInductor,
Triton, C++ extensions, CUDA's JIT cache) and temporary files are in its own folder.

Where the kernel allows namespaces (``sandbox_available``: root, or unprivileged user namespaces),
the candidate runs in a sandbox (``evals.judge.supervisor``) where every file system but its folder is
read-only and no process outside is visible: a write into the project or a cache is refused by the
kernel, and a write another process makes meanwhile is not the candidate's. Elsewhere, writes into
the project, the kernel cache, Python's start-up folders and the default compile caches are found
by comparing snapshots (mtime, size) taken before and after the attempt, and blamed on the
candidate whoever made them (docs/harness.md).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from evals.judge import wire

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|^LANGSMITH_|^LANGCHAIN_"
                        r"|^OPENAI_|^ANTHROPIC_|^AWS_|^AZURE_|^GOOGLE_|^GCP_|^HF_|^HUGGING|^GH_|^GITHUB_|^WANDB_",
                        re.IGNORECASE)
SNAPSHOT_SKIP = {".git", "node_modules", ".venv", "venv"}
SNAPSHOT_MAX_FILES = 50_000
CANDIDATE_ALLOC_CONF = "expandable_segments:True"  # a candidate's allocator where the user configured none
SETTLED_S = 300  # a kernel-cache file this old belongs to no build running beside the attempt


def candidate_env(base: dict | None = None, workdir: str | None = None) -> dict:
    """The environment a candidate gets: without secrets, with the project importable, and (given its
    folder) its compile caches and temporary files in that folder."""
    env = {k: v for k, v in (base if base is not None else os.environ).items() if not SECRET_ENV.search(k)}
    # The project first, then the host's own entries (a GPU host may carry the dependencies on PYTHONPATH);
    # relative entries would resolve inside the candidate's folder, so they are dropped.
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(PROJECT_ROOT), *inherited]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a .pyc written from here could reach the judge's next import
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSTARTUP", None)
    if env.get("MUCUTLASS_JUDGE_ALLOC_CONF") and env.get("PYTORCH_CUDA_ALLOC_CONF") == env["MUCUTLASS_JUDGE_ALLOC_CONF"]:
        env.pop("PYTORCH_CUDA_ALLOC_CONF")  # the judge's allocator settings are its own; a candidate's are the user's
    # where the user set none: segments that grow in place. A candidate holds the harness's sets of many sizes (two
    # 8 GiB inputs, the next one arriving) and the default allocator left 4 GiB of its share reserved in pieces no
    # 8 GiB tensor fits; allocation only, no kernel or numerics changes
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", CANDIDATE_ALLOC_CONF)
    for var in ("NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"):  # numerics are the harness's to set
        env.pop(var, None)
    env.pop("PYTHONHOME", None)
    if not user_site_needed():
        env["PYTHONNOUSERSITE"] = "1"  # a .pth or usercustomize in the user's site folder runs at every start
    if workdir is not None:
        cache = os.path.join(workdir, ".cache")
        # The kernel cache the judge configured stays the one it reads (XDG_CACHE_HOME moves the default).
        try:
            from dsl_compiler.build import cache_dir

            env.setdefault("MUCUTLASS_CACHE_DIR", str(cache_dir()))
        except Exception:  # noqa: BLE001 - no cache configured
            pass
        env.setdefault("MUCUTLASS_CUDA_EXT_DIR", str(_cuda_ext_dir()))
        env.update(TMPDIR=workdir, XDG_CACHE_HOME=cache, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(cache, "triton"), TRITON_HOME=cache,
                   TORCH_EXTENSIONS_DIR=os.path.join(cache, "torch_extensions"),
                   CUDA_CACHE_PATH=os.path.join(cache, "nv"))
    return env


def _cuda_ext_dir() -> Path:
    """The load_inline build folders of ``cuda`` candidates (evals.cuda_candidates): built outside the
    candidate, loaded by it; torch's loader takes a lock file there, so it stays writable in the sandbox."""
    from evals.cuda_candidates import ext_cache_dir

    return ext_cache_dir()


def user_site_needed() -> bool:
    """Whether the user's site folder holds packages (then candidates keep it on their path)."""
    import site

    try:
        return site.ENABLE_USER_SITE is not False and any(os.scandir(site.getusersitepackages()))
    except OSError:
        return False


def startup_folders() -> list[Path]:
    """Folders whose new entries run in every later Python process (.pth, sitecustomize, usercustomize)
    or are loaded by key by later compiles (the default compile caches): top-level entries count."""
    import getpass
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    home = Path(os.path.expanduser("~"))
    out = [Path(paths["purelib"]), Path(paths["platlib"]), Path(paths["stdlib"]), Path(paths["platstdlib"]),
           Path(site.getusersitepackages()),
           Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}", home / ".triton" / "cache",
           home / ".cache" / "torch_extensions", home / ".nv" / "ComputeCache"]
    # every folder of the import path (lib-dynload, a PYTHONPATH entry): a sitecustomize.py there runs at start-up
    out += [Path(p) for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
    return list(dict.fromkeys(out))


_SANDBOX: bool | None = None


def sandbox_available() -> bool:
    """Whether candidates run in the namespace sandbox here (probed once; MUCUTLASS_SANDBOX=0 turns it off)."""
    global _SANDBOX
    if _SANDBOX is None:
        if os.environ.get("MUCUTLASS_SANDBOX", "1").strip().lower() in ("0", "off", "false", "no"):
            _SANDBOX = False
        else:
            with tempfile.TemporaryDirectory(prefix="mucutlass-probe-") as d:
                try:
                    _SANDBOX = subprocess.run([sys.executable, "-P", "-s", "-m", "evals.judge.supervisor", "--probe"],
                                              cwd=d, env=candidate_env(), capture_output=True, timeout=30).returncode == 0
                except (OSError, subprocess.SubprocessError):
                    _SANDBOX = False
    return _SANDBOX


def sandbox_refused() -> None:
    """A supervisor could not build the sandbox after all: later candidates run without it."""
    global _SANDBOX
    _SANDBOX = False


def protected_roots() -> list[tuple[Path, bool]]:
    """Folders a candidate must not write into, each with whether new entries count: the project
    (the harness's own code, the problems; any change counts) and the kernel cache (builds running
    beside the attempt add entries, so only a changed or removed existing file counts)."""
    roots = [(PROJECT_ROOT, True)]
    # The kernel cache the builds use and the user's default one (a run without MUCUTLASS_CACHE_DIR reads
    # that one later), each whether or not it exists yet: a candidate may be the one to create it.
    caches: list[Path] = []
    try:
        from dsl_compiler.build import cache_dir

        caches.append(Path(cache_dir()))
    except Exception:  # noqa: BLE001 - no cache configured
        pass
    try:
        import platformdirs

        caches.append(Path(platformdirs.user_cache_dir("mucutlass")) / "kernels")
    except Exception:  # noqa: BLE001 - no user cache folder on this system
        pass
    roots += [(c, False) for c in dict.fromkeys(caches)]
    return roots


def snapshot(roots: list[tuple[Path, bool]]) -> dict[str, tuple[int, int, bool]]:
    """path -> (mtime_ns, size, strict) of every file under ``roots``, and of every folder under a
    strict root (a folder's mtime shows a file created and removed again)."""
    out: dict[str, tuple[int, int, bool]] = {}
    for root, strict in roots:
        stack = [str(root)]
        while stack and len(out) < SNAPSHOT_MAX_FILES:
            top = stack.pop()
            try:
                if strict:
                    out[top] = (os.stat(top).st_mtime_ns, 0, strict)
                entries = list(os.scandir(top))
            except OSError:
                continue
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        # hidden folders (.git, .cache with run outputs and checkpoints) are written by the
                        # product beside the attempt; the code, the problems and __pycache__ are watched
                        if e.name not in SNAPSHOT_SKIP and not e.name.startswith("."):
                            stack.append(e.path)
                    else:
                        st = e.stat(follow_symlinks=False)
                        out[e.path] = (st.st_mtime_ns, st.st_size, strict)
                except OSError:
                    continue
    return out


def changed_paths(before: dict, after: dict) -> list[str]:
    """Paths written between two snapshots: changed or removed entries, and new ones under strict roots."""
    settled_ns = time.time_ns() - SETTLED_S * 10**9

    def counts(p: str) -> bool:  # under a shared root, only files older than any build running beside us
        v = before[p]
        return v[2] or v[0] < settled_ns

    changed = [p for p, v in after.items() if (p in before and before[p] != v and counts(p)) or (p not in before and v[2])]
    removed = [p for p in before if p not in after and counts(p)]
    return sorted(changed + removed)


# What dsl_compiler.build names a cache entry, its failed builds, locks and temporary folders (".<key>.<random>")
# and its toolchain memo: never touched here, since builds beside the attempt write them (and a cached library
# is checked against the digest recorded at build time before it is loaded).
KERNEL_ENTRY = re.compile(r"^(\.?[0-9a-f]{32}([._-].*)?|toolchain\.json(\..*)?)$")
CONTENT_MAX_BYTES = 1 << 20


class ProtectedTree:
    """The protected folders, their snapshot, and the contents of the project's files (so that a
    candidate's write can be undone, not only seen)."""

    def __init__(self, roots: list[tuple[Path, bool]] | None = None, shallow: list[Path] | None = None):
        self.roots = protected_roots() if roots is None else roots
        # top-level entries only (site-packages is too large to walk at every attempt; a new .pth is at the top)
        shallow = (startup_folders() if roots is None else []) if shallow is None else shallow
        # a folder a root already walks whole, new entries counted (the project, on the worker's import path),
        # is not listed twice
        self.shallow = [t for t in shallow if not any(strict and Path(t).is_relative_to(r) for r, strict in self.roots)]
        self.contents: dict[str, tuple[tuple, bytes]] = {}

    def _snapshot(self) -> dict:
        snap = snapshot(self.roots)
        for top in self.shallow:
            try:
                snap[str(top)] = (os.stat(top).st_mtime_ns, 0, True)
                entries = list(os.scandir(top))
            except OSError:
                continue
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                    snap[e.path] = (st.st_mtime_ns, st.st_size if not e.is_dir(follow_symlinks=False) else 0, True)
                except OSError:
                    continue
        return snap

    def snapshot(self) -> dict:
        snap = self._snapshot()
        for path, (mtime, size, strict) in snap.items():
            if strict and size <= CONTENT_MAX_BYTES and (path not in self.contents or self.contents[path][0] != (mtime, size)):
                try:
                    if os.path.isfile(path):
                        self.contents[path] = ((mtime, size), Path(path).read_bytes())
                except OSError:
                    pass
        return snap

    def written(self, before: dict) -> list[str]:
        """What was written since ``before``; planted kernel-cache entries included."""
        after = self._snapshot()
        changed = changed_paths(before, after)
        for kernels, strict in self.roots:  # the kernel cache (dsl_compiler.build.cache_dir) is the non-strict root
            if strict or not kernels.is_dir():
                continue
            for entry in kernels.iterdir():
                if str(entry) not in before and not KERNEL_ENTRY.match(entry.name):
                    changed.append(str(entry))
        return sorted(set(changed))

    def undo(self, before: dict, written: list[str]) -> None:
        """Remove what was planted, put back what was changed (files known to this tree)."""
        for path in sorted(written, key=len, reverse=True):
            p = Path(path)
            try:
                if path in before and path in self.contents and self.contents[path][0] == before[path][:2]:
                    if not p.is_dir():
                        p.write_bytes(self.contents[path][1])
                        os.utime(p, ns=(before[path][0], before[path][0]))
                elif path not in before:
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
            except OSError:
                continue


@dataclass
class Finding:
    rule: str
    text: str


@dataclass
class CandidateProcess:
    proc: subprocess.Popen
    sock: socket.socket
    workdir: str
    log: object  # an unnamed temporary file: the candidate's stdout and stderr
    started_s: float
    seq: int = 0
    info: dict | None = None
    exit_state: dict | None = None
    findings: list[Finding] = field(default_factory=list)
    arena: wire.Arena | None = None  # shared memory for the tensors of requests and replies
    device: str = "cpu"  # where the judge wants the reply's tensors
    last_transfer: dict = field(default_factory=dict)  # seconds of the last request: pack, wait, unpack

    sandboxed: bool = False  # started in the namespace sandbox (writes outside its folder refused)
    armed_fd: int | None = None  # read end of a pipe whose writers close once the processes are undumpable
    forked: bool = False  # forked from the judge's fork server (evals.judge.zygote), not a new Python

    @classmethod
    def start(cls, python: str = sys.executable, cuda_visible: str | None = None,
              rss_limit_bytes: int = 0, sandbox: bool | None = None, zygote=None) -> "CandidateProcess":
        """``zygote``: the judge's fork server (``evals.judge.zygote.Zygote``); where it cannot fork now, a new
        Python is started as without one."""
        judge_end, cand_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            arena = wire.Arena.create()
        except OSError:  # no memfd here: tensors travel in the frames
            arena = None
        sandbox = sandbox_available() if sandbox is None else sandbox
        workdir = tempfile.mkdtemp(prefix="mucutlass-cand-")
        log = tempfile.TemporaryFile(prefix="mucutlass-candidate-", suffix=".log")  # unnamed: nothing left behind
        env = candidate_env(workdir=workdir)
        if cuda_visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda_visible
        ext = None
        if sandbox:
            try:
                ext = Path(env["MUCUTLASS_CUDA_EXT_DIR"])  # candidate_env's: the folder it leaves writable
                ext.mkdir(parents=True, exist_ok=True)
            except OSError:
                ext = None
        armed_r, armed_w = os.pipe()
        fd = cand_end.fileno()
        fds = (fd, armed_w) if arena is None else (fd, arena.fd, armed_w)
        flags = ["-P", "-s"] if env.get("PYTHONNOUSERSITE") else ["-P"]  # as candidate_env decided
        runner = [python, *flags, "-m", "evals.judge.candidate", "--fd", str(fd), "--armed-fd", str(armed_w)]
        if arena is not None:
            runner += ["--arena-fd", str(arena.fd)]
        cmd = [python, *flags, "-m", "evals.judge.supervisor", "--rss-limit-bytes", str(int(rss_limit_bytes)),
               *[a for f in fds for a in ("--pass-fd", str(f))], "--workdir", workdir,
               *(["--sandbox"] if sandbox else []), *(["--writable", str(ext)] if ext else []), "--", *runner]
        try:
            proc = zygote.fork(cmd, env, workdir, log.fileno(), fds) if zygote is not None else None
            forked = proc is not None
            if proc is None:
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=workdir,
                                        env=env, pass_fds=fds, start_new_session=True)
        finally:
            cand_end.close()
            os.close(armed_w)
        return cls(proc=proc, sock=judge_end, workdir=workdir, log=log, started_s=time.monotonic(), arena=arena,
                   sandboxed=sandbox, armed_fd=armed_r, forked=forked)

    def wait_armed(self, timeout_s: float = 30.0) -> bool:
        """Wait until this process and its supervisor are undumpable (or gone): no candidate code may
        run beside a process whose memory another process of the user can still write."""
        if self.armed_fd is None:
            return True
        ready, _, _ = select.select([self.armed_fd], [], [], timeout_s)
        if not ready:
            return False
        os.close(self.armed_fd)
        self.armed_fd = None
        return True

    def runner_pid(self) -> int | None:
        """The candidate process's pid as the judge sees it (in the sandbox it is 1 in its own namespace):
        the supervisor's child, read before any candidate code runs (later, orphans are its children too)."""
        sup = self.proc.pid
        try:
            with open(f"/proc/{sup}/task/{sup}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            return None
        return min(kids) if kids else None

    def supervisor_stopped(self) -> bool:
        """Whether the supervisor was stopped (SIGSTOP by the candidate, its same-user child): it then
        polls nothing and kills nothing."""
        from evals.judge.supervisor import stopped

        return self.proc.poll() is None and stopped(self.proc.pid)

    # -- requests ---------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, op: str, payload: dict, timeout_s: float, max_stream_bytes: int = 0) -> dict:
        """The reply to one request; ``ChannelError`` when the process died, hung, or answered
        anything but the reply bound to this request."""
        self.send(op, payload, timeout_s)
        return self.receive(timeout_s, max_stream_bytes)

    def send(self, op: str, payload: dict, timeout_s: float = 600.0) -> None:
        """The request half of ``request``: the judge may work while the candidate answers, then
        ``receive``. One request is outstanding at a time. Tensors the arena's free part cannot hold are
        pulled by the candidate through its stream region before this returns (within ``timeout_s``)."""
        self.seq += 1
        nonce = wire.new_nonce()
        t0 = time.perf_counter()
        self._early = None
        try:
            packed, reply_at, streams = wire.pack(payload, self.arena)
            msg = {"op": op, "nonce": nonce, "seq": self.seq, **packed, "reply_at": reply_at}
            wire.send(self.sock, msg)
            if streams:
                wire.serve(self.sock, self.arena, streams, time.monotonic() + timeout_s, alive=self._runner_alive)
        except wire.EarlyReply as early:  # it answered before taking the tensors: that is its reply
            self._early = early.frame
        except OSError:
            raise wire.ChannelError("crash", f"the candidate process was gone before '{op}'{self._tail()}") from None
        self._sent = (op, nonce, t0, time.perf_counter())

    def receive(self, timeout_s: float, max_stream_bytes: int = 0) -> dict:
        """The reply to the request ``send`` sent (its watchdog counted from now). ``max_stream_bytes``: the most
        its tensors may stream beyond the arena's free part (a reply claiming more is ``channel``)."""
        op, nonce, t0, t1 = self._sent
        deadline = time.monotonic() + timeout_s
        try:
            reply = self._early if getattr(self, "_early", None) is not None else \
                wire.recv(self.sock, deadline, alive=self._runner_alive)
            self._early = None
        except wire.ChannelError as exc:
            if exc.rule == "timeout":
                raise wire.ChannelError("timeout", f"no answer to '{op}' within the {timeout_s:g} s watchdog (a hang)") from None
            if exc.rule == "crash":
                self._await_exit(2.0)
                raise wire.ChannelError("crash", f"the candidate process died during '{op}'{self._tail()}") from None
            raise
        if not isinstance(reply, dict) or reply.get("nonce") != nonce or reply.get("seq") != self.seq:
            raise wire.ChannelError("channel", f"a reply to '{op}' not bound to its request (wrong nonce or sequence)")
        if wire.pending_bytes(self.sock):
            raise wire.ChannelError("channel", f"more bytes after the reply to '{op}': a second reply was written")
        t2 = time.perf_counter()
        try:
            reply = wire.unpack(reply, self.arena, self.device, sock=self.sock, deadline=deadline,
                                alive=self._runner_alive, max_stream_bytes=max_stream_bytes)
        except wire.EarlyReply as late:  # its reply's tensors could not be sent (it ran out of memory): its error
            reply = late.frame
            if reply.get("ok") is not False or reply.get("nonce") != nonce or reply.get("seq") != self.seq:
                raise wire.ChannelError("channel", f"a frame inside the reply to '{op}' that is not its error") from None
        except wire.ChannelError as exc:
            if exc.rule == "crash":
                self._await_exit(2.0)
                raise wire.ChannelError("crash", f"the candidate process died during '{op}'{self._tail()}") from None
            raise
        if wire.pending_bytes(self.sock):
            raise wire.ChannelError("channel", f"more bytes after the reply to '{op}': a second reply was written")
        self.last_transfer = {"pack_s": t1 - t0, "wait_s": t2 - t1, "unpack_s": time.perf_counter() - t2}
        return reply

    def set_memory_limit(self, rss_limit_bytes: int) -> None:
        """The host memory the candidate's tree may hold from now on (the supervisor polls it; 0: no limit)."""
        try:
            self.proc.stdin.write(f"limit {int(rss_limit_bytes)}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            pass

    def _await_exit(self, timeout_s: float) -> None:
        """The supervisor's exit report (it follows the candidate's death within a poll)."""
        deadline = time.monotonic() + timeout_s
        while self.exit_state is None and time.monotonic() < deadline:
            if not self._exit_reported():
                if self.proc.poll() is not None:
                    return
                time.sleep(0.02)

    def _runner_alive(self) -> bool:
        # the supervisor exits (after killing the tree) when the runner does; a stopped one ends the wait
        return self.proc.poll() is None and not self._exit_reported() and not self.supervisor_stopped()

    def _exit_reported(self) -> bool:
        ready, _, _ = select.select([self.proc.stdout], [], [], 0)
        if ready:
            line = self.proc.stdout.readline()
            if line:
                try:
                    state = json.loads(line)
                except json.JSONDecodeError:
                    return False
                if state.get("event") == "exit":
                    self.exit_state = state
                    return True
        return False

    def supervisor_report(self, timeout_s: float = 5.0) -> dict | None:
        """The supervisor's view of the tree now (escaped processes, peak RSS, memory limit); a stopped
        supervisor's view is ``stopped`` (the judge does not wait for it)."""
        if self.proc.poll() is not None or self.exit_state is not None:
            return self.exit_state
        if self.supervisor_stopped():
            return {"event": "report", "supervisor_stopped": True}
        try:
            self.proc.stdin.write(b"report\n")
            self.proc.stdin.flush()
        except OSError:
            return self.exit_state
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], deadline - time.monotonic())
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                break
            try:
                state = json.loads(line)
            except json.JSONDecodeError:
                continue
            if state.get("event") == "exit":
                self.exit_state = state
                return state
            if state.get("event") == "report":
                return state
        return None

    def _tail(self) -> str:
        try:  # pread: the candidate shares the file offset
            fd = self.log.fileno()
            text = os.pread(fd, min(os.fstat(fd).st_size, 1 << 20), max(0, os.fstat(fd).st_size - (1 << 20))).decode(
                errors="replace")
        except (OSError, ValueError):
            return ""
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        tail = " | ".join(lines[-2:])[-240:]
        code = self.proc.poll()
        what = ""
        if self.exit_state and self.exit_state.get("code") is not None:
            c = self.exit_state["code"]
            try:
                what = f" (signal {signal.Signals(-c).name})" if c < 0 else f" (exit code {c})"
            except ValueError:
                what = f" (signal {-c})"
        elif code is not None:
            what = f" (supervisor exit {code})"
        return what + (f"; last output: {tail}" if tail else "")

    # -- the end ------------------------------------------------------------------------------
    def kill_tree(self) -> None:
        """SIGKILL the supervisor's descendants, from the judge (a daemon orphaned to a stopped supervisor
        included), then the supervisor."""
        from evals.judge.supervisor import kill_descendants

        kill_descendants(self.proc.pid, rounds=20, pause_s=0.005)
        try:
            self.proc.kill()
        except OSError:
            pass

    def finish(self, timeout_s: float = 10.0) -> dict:
        """Kill the candidate and every descendant; the supervisor's exit report."""
        try:
            self.sock.close()
        except OSError:
            pass
        if self.armed_fd is not None:
            os.close(self.armed_fd)
            self.armed_fd = None
        if self.proc.poll() is None and self.supervisor_stopped():
            self.kill_tree()  # a stopped supervisor kills nothing: the judge ends the tree itself
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"kill\n")
                self.proc.stdin.flush()
            except OSError:
                pass
            try:
                out, _ = self.proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                out, _ = self.proc.communicate()
            for line in (out or b"").decode(errors="replace").splitlines():
                try:
                    state = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if state.get("event") == "exit":
                    self.exit_state = state
        shutil.rmtree(self.workdir, ignore_errors=True)
        try:
            self.log.close()
        except OSError:
            pass
        if self.arena is not None:
            self.arena.close()
            self.arena = None
        return self.exit_state or {}
