"""One process at a time per folder (an evaluation's --out, an optimize run directory).

The lock is an advisory ``flock`` on ``FOLDER/.mucutlass-lock``, which also records who holds it (pid,
host, start time, command) so a second process can say so. The kernel drops a ``flock`` when its
holder exits, however it exits (SIGKILL included), so a lock left by a dead process is taken over
at once; the recorded holder is only ever read while the lock is held by someone.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import platform
import sys
import time
from pathlib import Path

LOCK_FILE = ".mucutlass-lock"


class FolderBusy(Exception):
    """Another live process holds the folder; the message names it (pid, host, start time)."""


class FolderUnusable(Exception):
    """A folder that cannot be made or written in (a file is in the way, /proc, a read-only file system); one line."""


def make_folder(folder: str | Path, flag: str = "--out") -> Path:
    """Make ``folder`` (and its parents) and check that a file can be written in it, before any work is done
    that would have nowhere to go. ``flag`` names the option in the message."""
    import tempfile

    folder = Path(folder)
    try:
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(0, "exists and is not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise FolderUnusable(f"{flag} {folder}: cannot be used as a folder ({exc.strerror or exc}); choose another "
                             f"{flag}") from None
    return folder


def _holder_text(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another process"
    return (f"pid {info.get('pid')} on {info.get('host')} since {info.get('started_at')}"
            + (f" ({info['command']})" if info.get("command") else ""))


class FolderLock:
    """``with FolderLock(folder):`` holds the folder for this process; a second process gets
    ``FolderBusy`` at once, or with ``wait=True`` blocks until the holder is done."""

    def __init__(self, folder: str | Path, wait: bool = False, poll_s: float = 0.5):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.wait = wait
        self.poll_s = poll_s
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder_text(self.path)
                if not self.wait:
                    os.close(fd)
                    raise FolderBusy(f"{self.folder} is in use by {holder}; wait for it to finish, or pass --wait")
                if not told:
                    print(f"waiting for {self.folder}: in use by {holder}", file=sys.stderr)
                    told = True
                time.sleep(self.poll_s)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({
            "pid": os.getpid(), "host": platform.node(),
            "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200],
        }).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)  # closing drops the flock
                self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class DeviceTimingLock:
    """Measurements one at a time per GPU on this host, and no other judge's GPU work beside them: a
    readers-writer ``flock`` on a file named by the device's UUID in the temporary folder. A measurement
    (``shared=False``) holds it exclusively; a validation (``shared=True``) holds it shared, so
    validations run side by side but never while another judge times its candidate (a GPU time-sliced
    between processes stretches every clock the judge reads, and its wall-clock bounds flagged honest
    candidates as tampering when judges shared a GPU). A gate file in front of it keeps a waiting
    measurement from being starved by validations that keep arriving: a validation passes the gate (taken
    and dropped at once), a measurement holds it until it has the lock.

    Each wait is at most ``wait_s``; past it the work goes on without the lock, so a process that holds
    the file forever (a candidate of another judge where no sandbox hides the folder) costs that wait,
    never a verdict. ``waited_s`` and ``held`` say what happened. Without a ``device_key`` (work off a
    GPU, or the lock turned off) it is taken at once and never held."""

    def __init__(self, device_key: str | None, shared: bool = False, wait_s: float = 120.0, poll_s: float = 0.02,
                 folder: str | Path | None = None, give_up=None):
        import tempfile

        self.off = device_key is None
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(device_key))[:80]
        base = Path(folder or tempfile.gettempdir()) / f"mucutlass-timing-{safe}"
        self.path, self.gate_path = base.with_suffix(".lock"), base.with_suffix(".gate")
        self.shared, self.wait_s, self.poll_s = bool(shared), float(wait_s), float(poll_s)
        self.waited_s, self.held, self.gave_up = 0.0, False, False
        self.give_up = give_up  # a callable: true when the wait should end now, without the lock (optional work)
        self._fd: int | None = None

    def _take(self, path: Path, op: int, deadline: float) -> int | None:
        """An fd holding ``op`` on ``path``, or None when the deadline passed first (or the file cannot be
        opened: an unwritable temporary folder)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            return None
        while True:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if self.give_up is not None and self.give_up():
                    self.gave_up = True
                    os.close(fd)
                    return None
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return None
                time.sleep(self.poll_s)

    def record(self) -> dict:
        """What a result keeps of the lock: whether it was held and the wait (seconds)."""
        return {"held": self.held, "waited_s": round(self.waited_s, 3)}

    def acquire(self) -> DeviceTimingLock:
        if self.off:
            return self
        t0 = time.monotonic()
        deadline = t0 + self.wait_s
        gate = self._take(self.gate_path, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX, deadline)
        fd = None
        if gate is not None:  # else the wait is over (or no file): on without the lock
            try:
                fd = self._take(self.path, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX, deadline)
            finally:
                os.close(gate)
        self._fd, self.held = fd, fd is not None
        self.waited_s = time.monotonic() - t0
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def measurement_waiting(self) -> bool:
        """True while another judge's measurement waits at the gate (it holds the gate exclusively until it has
        the lock): shared work that can stop early (sets drawn ahead of need) stops and lets it in."""
        if self.off:
            return False
        try:
            fd = os.open(self.gate_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the probe's own shared hold

    def __enter__(self) -> DeviceTimingLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class DeviceHold:
    """One operation's hold on the GPU's timing lock, from its first GPU work to its last: shared for the work
    (input sets and references drawn, the candidate loaded and called), exclusive for a measurement, and shared
    again after it. Every GPU kernel a judge launches runs under one of the two, so none runs beside another
    judge's measurement (sets drawn outside the lock stretched the sealed calls of the judge timing beside them
    3-6x, and those honest programs were flagged). ``make(shared)`` makes the lock; a switch of mode releases
    before it acquires (two locks of one process on one file would wait for each other)."""

    def __init__(self, make) -> None:
        self.make = make
        self.lock: DeviceTimingLock | None = None

    def _hold(self, shared: bool) -> DeviceTimingLock:
        if self.lock is not None and self.lock.shared == shared:  # held, or its wait already spent
            return self.lock
        self.release()
        self.lock = self.make(shared).acquire()
        return self.lock

    def shared(self) -> DeviceTimingLock:
        return self._hold(True)

    def exclusive(self) -> DeviceTimingLock:
        return self._hold(False)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> DeviceHold:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def device_key(device) -> str:
    """The GPU's UUID (the same whatever CUDA_VISIBLE_DEVICES maps it to), else its name and index."""
    import torch

    try:
        return f"gpu-{torch.cuda.get_device_properties(device).uuid}"
    except Exception:  # noqa: BLE001 - older torch: the index within this process's view
        return f"gpu-{torch.cuda.get_device_name(device)}-{torch.device(device).index or 0}"
