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
