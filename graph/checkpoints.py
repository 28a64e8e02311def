"""Checkpoints: a SqliteSaver in the run directory, one thread per run, so ``mucutlass resume``
continues a killed run from its last completed node.

A checkpoint file is input like any other (an evaluation folder may be shared), so it is read with
an allow-list: plain data, the types LangGraph itself vets, and the project's own pydantic models
and enums. LangGraph's default deserializer calls any importable callable a checkpoint names, and
its strict mode silently hands back the raw payload; here anything else refuses the whole file
with one line (``CheckpointError``) before any of it is used.
"""

from __future__ import annotations

import enum
import importlib
import sqlite3
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as _lg_msgpack
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

CHECKPOINT_FILE = "checkpoints.sqlite"
# Packages whose pydantic models and enums a checkpoint may name.
PROJECT_PACKAGES = ("graph", "nodes", "evals", "dsl_compiler", "sol_models", "run_vocabulary")
_SAFE_TYPES = _lg_msgpack.SAFE_MSGPACK_TYPES
_SAFE_METHODS = _lg_msgpack.SAFE_MSGPACK_METHODS
_UNPACK_OPTIONS = ormsgpack.OPT_NON_STR_KEYS


class CheckpointError(Exception):
    """A checkpoint file that cannot be used: unreadable, or naming something outside the allow-list."""


# modules whose records moved: checkpoints written before the move name the old module
MOVED_MODULES = {"graph.records": "run_vocabulary.records", "graph.policies": "run_vocabulary.policies",
                 "evals.records": "run_vocabulary.records", "evals.policies": "run_vocabulary.policies",
                 "evals.variants": "run_vocabulary.variants", "evals.floor": "run_vocabulary.floor"}


def project_type(module: str, name: str) -> type | None:
    """The project's pydantic model or enum ``module.name``, or None when it is anything else."""
    if not isinstance(module, str) or not isinstance(name, str) or module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    module = MOVED_MODULES.get(module, module)
    try:
        obj = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    if isinstance(obj, type) and issubclass(obj, (BaseModel, enum.Enum)):
        return obj
    return None


_refusal = threading.local()  # ormsgpack replaces a hook's exception by "ext_hook failed"; keep ours


def _refuse(what: str) -> None:
    _refusal.error = CheckpointError(
        f"names {what}, which checkpoints may not hold (only plain data and the project's records)")
    raise _refusal.error


def _allowed_callable(module: Any, name: Any) -> Any:
    if (module, name) in _SAFE_TYPES:
        return getattr(importlib.import_module(module), name)
    cls = project_type(module, name)
    if cls is None:
        _refuse(f"{module}.{name}")
    return cls


def _ext_hook(code: int, data: bytes) -> Any:
    """LangGraph's extension records, decoded only for allowed types; anything else raises."""
    if code == jsonplus.EXT_DELTA_SNAPSHOT:
        return jsonplus._DeltaSnapshot(ormsgpack.unpackb(data, ext_hook=_ext_hook, option=_UNPACK_OPTIONS))
    if code not in (jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG, jsonplus.EXT_CONSTRUCTOR_POS_ARGS,
                    jsonplus.EXT_CONSTRUCTOR_KW_ARGS, jsonplus.EXT_METHOD_SINGLE_ARG, jsonplus.EXT_PYDANTIC_V2):
        _refuse(f"an extension record of kind {code}")
    tup = ormsgpack.unpackb(data, ext_hook=_ext_hook, option=_UNPACK_OPTIONS)
    if not isinstance(tup, (list, tuple)) or len(tup) < 3:
        _refuse("a malformed extension record")
    module, name, payload = tup[0], tup[1], tup[2]
    if code == jsonplus.EXT_METHOD_SINGLE_ARG:
        method = tup[3] if len(tup) > 3 else None
        if (module, name, method) not in _SAFE_METHODS:
            _refuse(f"{module}.{name}.{method}")
        return getattr(getattr(importlib.import_module(module), name), method)(payload)
    target = _allowed_callable(module, name)
    if code == jsonplus.EXT_PYDANTIC_V2 or (isinstance(target, type) and issubclass(target, BaseModel)):
        if not isinstance(payload, dict):
            _refuse(f"{module}.{name} with a payload that is not a mapping")
        return target.model_validate(payload) if issubclass(target, BaseModel) else target(**payload)
    if code == jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG:
        return target(payload)
    if code == jsonplus.EXT_CONSTRUCTOR_POS_ARGS:
        if module == "langgraph.types" and name == "Send":
            return jsonplus._send_from_args(payload)
        return target(*payload)
    return target(**payload)


class AllowListSerializer(jsonplus.JsonPlusSerializer):
    """LangGraph's serializer for writing; reading accepts plain data, LangGraph's vetted types and
    the project's records only, and raises ``CheckpointError`` on anything else."""

    def __init__(self) -> None:
        super().__init__(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None,
                         __unpack_ext_hook__=_ext_hook)

    def with_msgpack_allowlist(self, extra_allowlist) -> AllowListSerializer:
        return self  # the allow-list is this class's; the graph's schema types are the project's records

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, payload = data
        if type_ in ("null", "bytes", "bytearray"):
            return super().loads_typed(data)
        if type_ == "json":  # old checkpoints; revival limited to LangGraph's safe types (no allowed modules)
            try:
                return super().loads_typed(data)
            except (ValueError, TypeError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError among them
                raise CheckpointError(f"holds an unreadable JSON value ({type(exc).__name__})") from None
        if type_ != "msgpack":
            raise CheckpointError(f"holds a value serialized as {type_!r}, which checkpoints may not hold")
        _refusal.error = None
        try:
            return ormsgpack.unpackb(payload, ext_hook=_ext_hook, option=_UNPACK_OPTIONS)
        except (ValueError, TypeError) as exc:
            if _refusal.error is not None:
                raise _refusal.error from None
            raise CheckpointError(f"holds an unreadable value ({exc})") from None


def check_checkpoint(checkpoint: Any) -> None:
    """The shape LangGraph reads a checkpoint in (an id, channel values and their versions); a value of any
    other shape would fail deep inside the graph (``EmptyInputError`` for one that holds no channel)."""
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"holds a checkpoint that is a {type(checkpoint).__name__}, not a mapping")
    try:
        uuid.UUID(checkpoint.get("id"))  # LangGraph orders checkpoints by their ids, which are UUIDs
    except (TypeError, ValueError, AttributeError):
        raise CheckpointError("holds a checkpoint whose id is not a UUID") from None
    for key in ("channel_values", "channel_versions", "versions_seen"):
        if not isinstance(checkpoint.get(key), dict):
            raise CheckpointError(f"holds a checkpoint whose {key} is not a mapping")
    if not checkpoint["channel_versions"]:
        raise CheckpointError("holds a checkpoint with no state in it")


class CheckedSaver(SqliteSaver):
    """A SqliteSaver whose reads fail only with ``CheckpointError``: a value the allow-list lets through but
    LangGraph cannot use (a checkpoint of the wrong shape, an id it cannot parse) is refused at once too."""

    def get_tuple(self, config):
        try:
            found = super().get_tuple(config)
            if found is not None:
                check_checkpoint(found.checkpoint)
        except (CheckpointError, sqlite3.DatabaseError):
            raise
        except Exception as exc:  # noqa: BLE001 - whatever LangGraph trips over in a crafted row
            raise CheckpointError(f"holds an unreadable checkpoint ({type(exc).__name__}: {exc})") from None
        return found


@contextmanager
def open_saver(run_dir: str | Path) -> Iterator[SqliteSaver]:
    path = Path(run_dir) / CHECKPOINT_FILE
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False)
        conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()  # fails at once on a garbage file
    except sqlite3.DatabaseError as exc:
        raise CheckpointError(f"{path}: not a checkpoint file ({exc})") from None
    try:
        yield CheckedSaver(conn, serde=AllowListSerializer())
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    except sqlite3.DatabaseError as exc:  # a damaged page met while reading or writing
        raise CheckpointError(f"{path}: damaged checkpoint file ({exc})") from None
    finally:
        conn.close()


def thread_config(run_id: str) -> dict:
    return {"configurable": {"thread_id": run_id}}
