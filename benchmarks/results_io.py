"""A benchmark's result file pair: ``<stem>.json`` (the document) and ``<stem>.md`` (its table)."""

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
