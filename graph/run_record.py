"""run.json: what a run directory records of its start, and how ``resume`` reads it back.

A run folder is data: nothing in it chooses code to run or where a key is sent. It may come from
someone else (a shared evaluation, a copied run), so:

- the problem is recorded by its path and the SHA-256 of its source, sealed with a key of this user's
  (an HMAC; the key lives in the user's state folder, never in a run folder). ``resume`` imports the
  recorded problem only when the seal checks out and the file still has that content; a record that
  is not this user's, a problem that changed or moved, or a checkpoint naming another problem is
  refused unless the user names the problem again (``--problem``), which records it afresh;
- the tier is recorded by its name and a digest of the spec it resolved to, never by a tiers file, an
  endpoint or the variable holding a key: ``resume`` resolves the name in the user's own configuration
  (the built-in tiers, ``--tiers-file``, ``MUCUTLASS_TIERS``) and warns when that spec has changed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
STATE_DIR_ENV = "MUCUTLASS_STATE_DIR"  # where the seal key lives (default: the user's state folder)
SEAL_KEY_FILE = "run-seal.key"
SEALED_FIELDS = ("problem_path", "problem_sha256")


class RunError(Exception):
    """A run cannot start or resume (missing run directory, unreadable run.json, a problem it may not
    import): one line."""


def source_sha256(path: str | Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise RunError(f"{path}: cannot read the problem ({exc.strerror or exc})") from None


def state_dir() -> Path:
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    import platformdirs

    return Path(platformdirs.user_state_dir("mucutlass"))


def seal_key(create: bool) -> bytes | None:
    """This user's seal key (32 random bytes, readable by the user alone), made on first use; None where it
    cannot be read or made (a read-only home): runs are then unsealed, and resume asks for the problem."""
    path = state_dir() / SEAL_KEY_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
    except FileExistsError:  # another process made it first
        pass
    except OSError:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def _seal(record: dict[str, Any], key: bytes) -> str:
    message = json.dumps({k: record.get(k) for k in SEALED_FIELDS}, sort_keys=True).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sealed(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the seal over its problem path and hash (none where no key can be made)."""
    key = seal_key(create=True)
    return {**record, "seal": _seal(record, key) if key else None}


def seal_holds(record: dict[str, Any]) -> bool:
    key = seal_key(create=False)
    seal = record.get("seal")
    return bool(key and isinstance(seal, str) and hmac.compare_digest(seal, _seal(record, key)))


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Write run.json whole (a temporary file moved into place), sealed."""
    path = run_dir / RUN_FILE
    tmp = path.with_name(f".{RUN_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(sealed(record), indent=2))
    os.replace(tmp, path)


def read_record(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RUN_FILE
    if not path.is_file():
        raise RunError(f"{run_dir}: not a run directory (no {RUN_FILE})")
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
            raise ValueError("expected an object with the run's settings")
        return record
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise RunError(f"{path}: unreadable run settings ({type(exc).__name__}: {exc}); "
                       "start the run again with `mucutlass optimize`") from None


def problem_to_resume(run_dir: Path, record: dict[str, Any], named: str | Path | None) -> tuple[str, str]:
    """(path, sha256) of the problem a resume may import: the one the user names, else the recorded one if
    this user's seal holds and the file still has the recorded content. Raises RunError (one line) otherwise."""
    again = f"name the problem to resume with: mucutlass resume {run_dir} --problem PATH"
    if named is not None:
        path = Path(named).resolve()
        if not path.is_file():
            raise RunError(f"--problem {named}: no such problem file")
        return str(path), source_sha256(path)
    recorded = record.get("problem_path")
    if not isinstance(recorded, str) or not recorded:
        raise RunError(f"{run_dir / RUN_FILE}: names no problem; {again}")
    if not seal_holds(record):
        raise RunError(f"{run_dir / RUN_FILE}: its problem ({recorded}) was not recorded by a run of this user, or "
                       f"the record changed since; nothing of it is imported; {again}")
    if not Path(recorded).is_file():
        raise RunError(f"{recorded}: the run's problem file is gone (moved or deleted); {again}")
    sha = source_sha256(recorded)
    if sha != record.get("problem_sha256"):
        raise RunError(f"{recorded}: changed since the run started (its SHA-256 differs from the one recorded); "
                       f"to resume with it as it is now, {again.replace('PATH', recorded)}")
    return recorded, sha
