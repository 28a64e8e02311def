"""The results store of one evaluation: a single SQLite file.

Tables: ``evaluation`` (one row: config and environment), ``runs`` (one row per problem, tier,
policy and variant: status and the run's summary) and ``attempts`` (every field of every
AttemptRecord). A store written before variants existed gains the ``variant`` column on opening
(its runs were all of the default variant).
Attempts are written as they arrive, so a killed evaluation keeps everything it finished; a run
counts as done only once its summary is stored, which is what resume looks at.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from run_vocabulary.records import AttemptRecord, RunSummary
from run_vocabulary.variants import DEFAULT_VARIANT

RunStatus = Literal["running", "done", "failed", "failed_to_start", "derived"]
FINISHED: tuple[RunStatus, ...] = ("done", "derived")


class StoreError(Exception):
    """The file is not a results store, or does not belong to this evaluation."""


def _column_type(annotation: Any) -> str:
    origin = get_origin(annotation)
    args = [a for a in get_args(annotation) if a is not type(None)]
    base = args[0] if origin is not None and len(args) == 1 and get_origin(args[0]) is None else annotation
    if base is bool or base is int:
        return "INTEGER"
    if base is float:
        return "REAL"
    if base is str:
        return "TEXT"
    return "TEXT"  # lists, literals: JSON or plain text


# The attempts table follows AttemptRecord: a new field there becomes a new column here.
_ATTEMPT_FIELDS = list(AttemptRecord.model_fields)
_JSON_FIELDS = {n for n, f in AttemptRecord.model_fields.items() if get_origin(f.annotation) is list}
_BOOL_FIELDS = {n for n, f in AttemptRecord.model_fields.items() if f.annotation is bool}

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS evaluation (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  config_json TEXT NOT NULL,
  environment_json TEXT NOT NULL,
  created_at REAL NOT NULL,
  resumed_at REAL
);
CREATE TABLE IF NOT EXISTS runs (
  problem TEXT NOT NULL,
  tier TEXT NOT NULL,
  policy TEXT NOT NULL,
  variant TEXT NOT NULL DEFAULT '{DEFAULT_VARIANT}',
  status TEXT NOT NULL,
  run_dir TEXT,
  derived_from TEXT,
  error TEXT,
  summary_json TEXT,
  started_at REAL,
  finished_at REAL,
  PRIMARY KEY (problem, tier, policy, variant)
);
CREATE TABLE IF NOT EXISTS attempts (
  problem TEXT NOT NULL,
  tier TEXT NOT NULL,
  policy TEXT NOT NULL,
  variant TEXT NOT NULL DEFAULT '{DEFAULT_VARIANT}',
  {", ".join(f'"{n}" {_column_type(AttemptRecord.model_fields[n].annotation)}' for n in _ATTEMPT_FIELDS)},
  PRIMARY KEY (problem, tier, policy, variant, "index")
);
"""


def _migrate_variant(db: sqlite3.Connection) -> None:
    """Stores made before variants: rebuild runs and attempts with the variant in their key (a primary
    key cannot be altered in place), every old row of the default variant; one transaction."""
    cols = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    if not cols or "variant" in cols:
        return
    db.execute("BEGIN")
    try:
        for table in ("runs", "attempts"):
            db.execute(f"ALTER TABLE {table} RENAME TO {table}_before_variants")
        for statement in _SCHEMA.split(";"):
            if "TABLE IF NOT EXISTS runs" in statement or "TABLE IF NOT EXISTS attempts" in statement:
                db.execute(statement)
        for table in ("runs", "attempts"):
            names = ", ".join(f'"{r[1]}"' for r in db.execute(f"PRAGMA table_info({table}_before_variants)"))
            db.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {table}_before_variants")
            db.execute(f"DROP TABLE {table}_before_variants")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


STORE_TABLES = ("evaluation", "runs", "attempts")


def _foreign_tables(db: sqlite3.Connection) -> list[str]:
    """The tables and views of a file that a results store does not have: a store holds ``STORE_TABLES`` only
    (one made before variants, the same), an empty file nothing."""
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                      "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    return [n for n in names if n not in STORE_TABLES]


_ATTEMPT_COLUMNS = ", ".join(f'"{n}"' for n in _ATTEMPT_FIELDS)
_INTO_ATTEMPTS = (f"INTO attempts (problem, tier, policy, variant, {_ATTEMPT_COLUMNS}) "
                  f"VALUES ({', '.join('?' * (4 + len(_ATTEMPT_FIELDS)))})")


def _attempt_row(record: AttemptRecord) -> list[Any]:
    data = record.model_dump()
    return [json.dumps(data[n]) if n in _JSON_FIELDS else data[n] for n in _ATTEMPT_FIELDS]


def _attempt_from_row(row: sqlite3.Row) -> AttemptRecord:
    data = {}
    for n in _ATTEMPT_FIELDS:
        value = row[n]
        if n in _JSON_FIELDS:
            value = json.loads(value) if value else []
        elif n in _BOOL_FIELDS:
            value = bool(value)
        data[n] = value
    return AttemptRecord.model_validate(data)


class ResultsStore:
    """One evaluation's results. Safe to share between threads of the driver process."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"{self.path}: not a file")
        existed = self.path.is_file() and self.path.stat().st_size > 0
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._db.row_factory = sqlite3.Row
            # what the file is, before anything is written to it (WAL mode rewrites its header)
            # a damaged page is found here, in one line, not half-way through a report
            problem = self._db.execute("PRAGMA quick_check(1)").fetchone()[0] if existed else "ok"
            foreign = _foreign_tables(self._db) if problem == "ok" else []
            if problem == "ok" and not foreign:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                _migrate_variant(self._db)
                self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a results store ({exc})") from None
        if problem != "ok" or foreign:
            self._db.close()
        if problem != "ok":
            raise StoreError(f"{self.path}: damaged results store ({' '.join(str(problem).split())}); restore it "
                             "from a copy, or start a new evaluation with another --out")
        if foreign:
            raise StoreError(f"{self.path}: a SQLite file but not a mucutlass results store (it holds "
                             f"{', '.join(foreign[:5])}{' and more' if len(foreign) > 5 else ''}); nothing was written "
                             "to it; choose another --out")

    @classmethod
    def open_existing(cls, path: str | Path) -> ResultsStore:
        """Open a finished or partial evaluation for reading (replay, report)."""
        p = Path(path)
        if p.is_dir():
            p = p / "results.sqlite"
        if not p.is_file():
            raise StoreError(f"{p}: no such results store (expected EVAL_DIR or EVAL_DIR/results.sqlite)")
        store = cls(p)
        if store.config() is None:
            raise StoreError(f"{p}: holds no evaluation (was `mucutlass eval` run with this --out?)")
        return store

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._db:
            yield self._db

    # evaluation ---------------------------------------------------------------------------------
    def init_evaluation(self, config: dict, environment: dict, *, resume_keys: tuple[str, ...] = ()) -> bool:
        """Record the evaluation, or check that this store holds the same one. Returns True on resume.

        ``resume_keys`` are the config entries that must match for a resume to be valid (the same
        problems, tiers and budget); others (output paths, executor) may change between invocations.
        """
        with self._tx() as db:
            row = db.execute("SELECT config_json FROM evaluation WHERE id = 1").fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO evaluation (id, config_json, environment_json, created_at) VALUES (1, ?, ?, ?)",
                    (json.dumps(config, sort_keys=True), json.dumps(environment, sort_keys=True), time.time()),
                )
                return False
            stored = json.loads(row["config_json"])
            stored.setdefault("variants", [DEFAULT_VARIANT])  # evaluations made before variants ran the default
            for key in resume_keys:
                if stored.get(key) != config.get(key):
                    raise StoreError(
                        f"{self.path}: holds an evaluation with {key}={stored.get(key)!r}, not {config.get(key)!r}; "
                        "use another --out to start a new evaluation"
                    )
            db.execute("UPDATE evaluation SET resumed_at = ? WHERE id = 1", (time.time(),))
            return True

    def config(self) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT config_json FROM evaluation WHERE id = 1").fetchone()
        return json.loads(row["config_json"]) if row else None

    def environment(self) -> dict:
        with self._lock:
            row = self._db.execute("SELECT environment_json FROM evaluation WHERE id = 1").fetchone()
        return json.loads(row["environment_json"]) if row else {}

    # runs ---------------------------------------------------------------------------------------
    def start_run(self, problem: str, tier: str, policy: str, run_dir: str | None = None, *,
                  variant: str = DEFAULT_VARIANT) -> None:
        with self._tx() as db:
            db.execute(
                """INSERT INTO runs (problem, tier, policy, variant, status, run_dir, started_at)
                   VALUES (?, ?, ?, ?, 'running', ?, ?)
                   ON CONFLICT (problem, tier, policy, variant) DO UPDATE SET status='running', run_dir=excluded.run_dir,
                   error=NULL, started_at=excluded.started_at""",
                (problem, tier, policy, variant, run_dir, time.time()),
            )

    def record_attempt(self, problem: str, tier: str, policy: str, attempt: AttemptRecord, *,
                       variant: str = DEFAULT_VARIANT) -> None:
        """Store one attempt as soon as it finishes; a repeat of the same index replaces it."""
        with self._tx() as db:
            db.execute(
                f"INSERT OR REPLACE {_INTO_ATTEMPTS}",
                [problem, tier, policy, variant, *_attempt_row(attempt)],
            )

    def finish_run(self, summary: RunSummary, *, status: RunStatus = "done", derived_from: str | None = None) -> None:
        """Store a run's summary and its attempts (the summary's list is authoritative)."""
        key = (summary.problem, summary.tier, summary.policy, summary.variant)
        with self._tx() as db:
            db.execute("DELETE FROM attempts WHERE problem = ? AND tier = ? AND policy = ? AND variant = ?", key)
            db.executemany(
                f"INSERT {_INTO_ATTEMPTS}",
                [[*key, *_attempt_row(a)] for a in summary.attempts],
            )
            db.execute(
                """INSERT INTO runs (problem, tier, policy, variant, status, derived_from, summary_json, started_at,
                   finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (problem, tier, policy, variant) DO UPDATE SET status=excluded.status,
                   derived_from=excluded.derived_from, summary_json=excluded.summary_json, error=NULL,
                   finished_at=excluded.finished_at""",
                (*key, status, derived_from, summary.model_dump_json(exclude={"attempts"}), time.time(), time.time()),
            )

    def fail_run(self, problem: str, tier: str, policy: str, error: str, *, variant: str = DEFAULT_VARIANT,
                 status: Literal["failed", "failed_to_start"] = "failed") -> None:
        """A run that raised (``failed``) or could not start (``failed_to_start``: no key, unknown tier,
        a problem whose setup fails): retried on resume, its attempts so far kept."""
        with self._tx() as db:
            db.execute(
                """INSERT INTO runs (problem, tier, policy, variant, status, error, finished_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (problem, tier, policy, variant) DO UPDATE SET status=excluded.status,
                   error=excluded.error, finished_at=excluded.finished_at""",
                (problem, tier, policy, variant, status, error, time.time()),
            )

    def run_status(self) -> dict[tuple[str, str, str, str], str]:
        """(problem, tier, policy, variant) -> status."""
        with self._lock:
            rows = self._db.execute("SELECT problem, tier, policy, variant, status FROM runs").fetchall()
        return {(r["problem"], r["tier"], r["policy"], r["variant"]): r["status"] for r in rows}

    def finished_keys(self) -> set[tuple[str, str, str, str]]:
        return {k for k, s in self.run_status().items() if s in FINISHED}

    def failures(self) -> dict[tuple[str, str, str, str], str]:
        """Runs that failed or could not start -> their one-line error."""
        with self._lock:
            rows = self._db.execute(
                "SELECT problem, tier, policy, variant, status, error FROM runs "
                "WHERE status IN ('failed', 'failed_to_start')").fetchall()
        return {(r["problem"], r["tier"], r["policy"], r["variant"]):
                ("failed to start: " if r["status"] == "failed_to_start" else "") + (r["error"] or "") for r in rows}

    def attempts(self, problem: str, tier: str, policy: str, variant: str = DEFAULT_VARIANT) -> list[AttemptRecord]:
        with self._lock:
            rows = self._db.execute(
                'SELECT * FROM attempts WHERE problem = ? AND tier = ? AND policy = ? AND variant = ? ORDER BY "index"',
                (problem, tier, policy, variant),
            ).fetchall()
        return [_attempt_from_row(r) for r in rows]

    def summaries(self, *, statuses: tuple[str, ...] = FINISHED) -> list[RunSummary]:
        """Finished runs with their attempts, ordered by problem, tier, variant, policy."""
        marks = ", ".join("?" for _ in statuses)
        with self._lock:
            runs = self._db.execute(
                f"SELECT problem, tier, policy, variant, summary_json FROM runs WHERE status IN ({marks}) "
                "ORDER BY problem, tier, variant, policy",
                statuses,
            ).fetchall()
        out = []
        for r in runs:
            summary = RunSummary.model_validate_json(r["summary_json"])
            summary.variant = r["variant"]
            summary.attempts = self.attempts(r["problem"], r["tier"], r["policy"], r["variant"])
            out.append(summary)
        return out

    def derived_policies(self) -> dict[str, str]:
        """policy -> the policy whose log it was replayed from."""
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT policy, derived_from FROM runs WHERE status = 'derived'").fetchall()
        return {r["policy"]: r["derived_from"] for r in rows}
