"""A tier that plays back programs from files: reproduces a run, or runs the graph with no model.

``--tier playback:DIR`` plays DIR/*.mcu (μCUTLASS programs) or DIR/*.py (ModelNew modules, for the
cuda variants) in name order, one per attempt (the last one repeats); ``--tier playback:FILE`` plays
one file.
"""

from __future__ import annotations

from pathlib import Path

from run_vocabulary.variants import get_variant
from nodes.tier_types import TierError, TierSpec, WriterReply, WriterRequest


class PlaybackTier:
    """Plays back programs from files, one per attempt in name order (the last one repeats):
    a tier for reproducing a run and for running the graph without a model."""

    def __init__(self, source: str | Path | list[str | Path], name: str | None = None):
        paths = [Path(p) for p in source] if isinstance(source, list) else _program_files(Path(source))
        if not paths:
            raise TierError(f"playback: no .mcu or .py files in {source}")
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise TierError(f"playback: file not found: {missing[0]}")
        self.paths = paths
        # what it can answer with: "mcu" for programs, "python" for ModelNew modules (run_vocabulary.variants)
        self.languages = tuple(sorted({"python" if p.suffix == ".py" else "mcu" for p in paths}))
        self.name = name or "playback"
        self.spec = TierSpec(name=self.name, kind="playback", model="playback")

    def write(self, request: WriterRequest) -> WriterReply:
        suffix = ".py" if get_variant(request.variant).language == "python" else ".mcu"
        paths = [p for p in self.paths if p.suffix == suffix] or self.paths  # a mixed folder plays the variant's
        # chosen by attempt index, not an internal counter, so a resumed run replays identically
        path = paths[min(request.attempt_index, len(paths)) - 1]
        return WriterReply(path.read_text(), model=self.name)


def _program_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted([*path.glob("*.mcu"), *path.glob("*.py")], key=lambda p: p.name)
    raise TierError(f"playback: {path} is neither a .mcu or .py file nor a folder of them")
