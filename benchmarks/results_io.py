"""A benchmark's result file pair: ``<stem>.json`` (the document) and ``<stem>.md`` (its table); and the problems a
benchmark runs (a suite, narrowed by name)."""

from __future__ import annotations

import json
from pathlib import Path


def write_result(stem: Path, doc: dict, markdown: str) -> None:
    """Write the pair (the folder made if needed), print the table and where it went."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2, default=str))
    stem.with_suffix(".md").write_text(markdown)
    print(markdown)
    print(f"wrote {stem}.json and {stem}.md")


def gpu_slug(gpu_name: str | None) -> str:
    """A GPU's name as result files spell it ("NVIDIA H200" -> "h200"); "cpu" without one."""
    if not gpu_name:
        return "cpu"
    words = [w for w in gpu_name.lower().replace("nvidia", " ").split() if w]
    return "-".join(words) or "gpu"


def suite_problems(suite: str, only: list[str] | None) -> list | None:
    """The problems of ``suite`` whose name holds one of ``only`` (all without it); None, after one line on stderr,
    where the suite cannot be loaded."""
    import sys

    from evals.problems import ProblemError, load_suite

    try:
        problems = load_suite(suite)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    return [p for p in problems if any(o in p.name for o in only)] if only else problems
