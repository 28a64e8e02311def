"""Checkpoints: a SqliteSaver in the run directory, one thread per run, so ``mucutlass resume``
continues a killed run from its last completed node."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from langgraph.checkpoint.sqlite import SqliteSaver

CHECKPOINT_FILE = "checkpoints.sqlite"


@contextmanager
def open_saver(run_dir: str | Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(str(Path(run_dir) / CHECKPOINT_FILE), check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def thread_config(run_id: str) -> dict:
    return {"configurable": {"thread_id": run_id}}
