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
