"""Memory across problems: after each attempt, a short note (hypothesis, expected gain, actual result,
why) goes into a LangGraph store under ("memory", tier, variant); the writer of a later problem reads
the most relevant notes (same op family, same bound first) in its prompt.

A single run keeps its notes in the process (``InMemoryStore``); an evaluation shares one SQLite
store in its folder (``SqliteStore``) between its runs and worker processes, so problem 2 sees what
problem 1 learned and a resumed evaluation keeps what the killed one wrote.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from langgraph.store.base import BaseStore

from dsl_compiler.diagnostics import model_text
from run_vocabulary.records import AttemptRecord

RECALL_LIMIT = 6  # notes per prompt: enough to carry lessons, few enough to stay short
_STORES: dict[str | None, BaseStore] = {}
_LOCK = threading.Lock()


def open_store(path: str | None = None) -> BaseStore:
    """The memory store of this process for ``path`` (a SQLite file), or the in-process one for None."""
    with _LOCK:
        if path not in _STORES:
            if path is None:
                from langgraph.store.memory import InMemoryStore

                _STORES[path] = InMemoryStore()
            else:
                from langgraph.store.sqlite import SqliteStore

                conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=60)
                conn.execute("PRAGMA journal_mode=WAL")  # several worker processes write one evaluation's notes
                store = SqliteStore(conn)
                store.setup()
                _STORES[path] = store
        return _STORES[path]


def namespace(tier: str, variant: str) -> tuple[str, ...]:
    return ("memory", tier, variant)


def op_family(problem_source: str) -> str:
    """conv, gemm or other: what kind of problem a note is about, read off the reference source."""
    text = problem_source.lower()
    if re.search(r"conv[123]d|conv_transpose|\.conv\b", text):
        return "conv"
    if re.search(r"linear|matmul|\bbmm\b|\bmm\b|einsum|addmm|baddbmm|@", text):
        return "gemm"
    return "other"


def note_of(attempt: AttemptRecord, problem: str, family: str, bound: str, plan: Sequence[dict]) -> dict[str, Any]:
    """The note of one finished attempt: what was tried, what it was expected to buy, what it did, why."""
    expected = next((h.get("expected_gain") for h in plan if h.get("title") == attempt.hypothesis), None)
    if attempt.correct and attempt.t_us:
        speedup = attempt.speedup_vs_eager_fp32
        result = f"{attempt.t_us:.4g} us" + (f", {speedup:.2f}x over eager fp32" if speedup else "")
        why = ("new best" if attempt.improved else "correct, no gain over the best") + (
            f"; flagged: {attempt.flags[0]}" if attempt.flags else "")
    else:
        result = f"failed at {attempt.reached}" if attempt.reached != "done" else "failed"
        first = (model_text(attempt.diagnostics[0]) if attempt.diagnostics else attempt.failure_reason or "").splitlines()
        why = (first[0] if first else "")[:160]
    return {"problem": problem, "op_family": family, "bound": bound, "hypothesis": attempt.hypothesis[:100],
            "expected_gain": expected, "result": result, "why": why, "correct": attempt.correct,
            "improved": attempt.improved}


def render(note: dict[str, Any]) -> str:
    expected = f" (expected {note['expected_gain']:.2g}x)" if note.get("expected_gain") else ""
    return f"{note['problem']} ({note['bound']}-bound): {note['hypothesis']}{expected} -> {note['result']}; {note['why']}"


def remember(store: BaseStore, ns: tuple[str, ...], run_id: str, problem: str, family: str, bound: str,
             attempts: Sequence[AttemptRecord], plan: Sequence[dict], noted: int) -> int:
    """Write the notes of attempts ``noted`` onwards; returns how many attempts are noted now."""
    for a in attempts[noted:]:
        store.put(ns, f"{run_id}-{problem}-{a.index}", note_of(a, problem, family, bound, plan))
    return len(attempts)


def recall(store: BaseStore, ns: tuple[str, ...], family: str, bound: str, problem: str,
           limit: int = RECALL_LIMIT) -> list[str]:
    """Notes of other problems of the same op family, rendered: the same bound first, then what worked
    (a new best, then correct), then the latest."""
    items = [i for i in store.search(ns, filter={"op_family": family}, limit=500) if i.value.get("problem") != problem]
    items.sort(key=lambda i: (i.value.get("bound") != bound, not i.value.get("improved"), not i.value.get("correct"),
                              -i.updated_at.timestamp()))
    return [render(i.value) for i in items[:limit]]


# -- over the graph's state (what the nodes call) ------------------------------------------------


def _where(ctx: Any, state: dict) -> tuple[tuple[str, ...], str, str, str]:
    problem = ctx.services.problem(state["problem_path"])
    name = state.get("problem_name") or problem.name
    return namespace(ctx.tier, ctx.variant), name, op_family(problem.source), state.get("sol", {}).get("bound", "?")


def remember_state(store: BaseStore | None, ctx: Any, state: dict) -> dict:
    """The state update after noting the attempts finished since the last call (nothing without a store)."""
    attempts = state.get("attempts", [])
    if store is None or state.get("memory_noted", 0) >= len(attempts):
        return {}
    ns, name, family, bound = _where(ctx, state)
    records = [AttemptRecord.model_validate(a) for a in attempts]
    return {"memory_noted": remember(store, ns, ctx.run_id, name, family, bound, records, state.get("plan", []),
                                     state.get("memory_noted", 0))}


def recall_state(store: BaseStore | None, ctx: Any, state: dict) -> list[str]:
    if store is None:
        return []
    ns, name, family, bound = _where(ctx, state)
    return recall(store, ns, family, bound, name)
