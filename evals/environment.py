"""What numbers were measured on: versions, GPU, host. The one record of versions: evaluations,
their reports and the benchmark scripts all store and print it."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from typing import Any


def collect_environment(backend: str | None = None) -> dict[str, Any]:
    """What the numbers were measured on: GPU, driver-side versions, host. The one record of versions:
    evaluations and the benchmark scripts all store it."""
    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "backend": backend,
        "versions": {d: version(d) for d in ("mucutlass", "torch", "nvidia-cutlass", "langgraph", "pydantic", "ray")},
    }
    try:
        import torch

        env["torch_cuda"] = torch.version.cuda
        env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (cpu)"
        env["gpu_count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        env["gpu"] = "unknown"
    nvcc = shutil.which("nvcc")
    if nvcc:
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
            m = re.search(r"release ([\d.]+)", out)
            env["nvcc"] = m.group(1) if m else out.strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError):
            env["nvcc"] = None
    return env


def versions_text(env: dict[str, Any]) -> str:
    """One line of an environment's versions: the known packages, then CUDA and nvcc where recorded."""
    parts = [f"{k} {v}" for k, v in env.get("versions", {}).items() if v]
    parts += [f"{label} {env[key]}" for key, label in (("torch_cuda", "CUDA"), ("nvcc", "nvcc")) if env.get(key)]
    return ", ".join(parts)
