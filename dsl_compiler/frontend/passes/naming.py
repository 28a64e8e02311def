"""Names in the program the lowering writes: a traced name made a legal, unreserved, unique program name."""

from __future__ import annotations

import re

_RESERVED = {
    "program", "input", "param", "kernel", "torch", "output", "let", "store", "acc", "row", "col", "gemm", "conv",
    "conv1d", "conv2d", "conv3d", "grouped_gemm", "math", "accum", "tile", "cluster", "stages", "schedule", "raster",
    "swizzle", "decomposition", "split_k", "alignment", "auto", "true", "false", "none", "channels_last", "contiguous",
    "f32", "bf16", "f16", "tf32", "scalar", "full", "inf",
}


def safe_base(raw: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", raw).strip("_") or "t"
    if base[0].isdigit() or base.lower() in _RESERVED:
        base = f"t_{base}"
    return base


def kernel_base(node) -> str:
    """The name a kernel anchored at ``node`` asks for: its module's path, else the node's name."""
    return safe_base(str(node.target) if node.op == "call_module" else node.name)


class Namer:
    """Unique names, in the order they are asked for (a second ``y`` is ``y_2``)."""

    def __init__(self):
        self.used: set[str] = set()

    def __call__(self, raw: str) -> str:
        base = safe_base(raw)
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name
