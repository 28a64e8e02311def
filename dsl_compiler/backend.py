"""Which backend runs a program: the CUTLASS build where a GPU and nvcc are present, else the
reference interpreter (timings are then model estimates)."""

from __future__ import annotations

import shutil

BACKENDS = ("cutlass", "interpreter", "auto")


def gpu_available() -> tuple[bool, str]:
    """Whether a CUDA GPU and nvcc are present, without importing torch when nvcc is absent."""
    try:
        from dsl_compiler.build import ToolchainError, find_nvcc

        find_nvcc()  # the same search the build uses: CUDA_HOME, PATH, /usr/local/cuda, the nvcc wheel
    except ToolchainError:
        return False, "nvcc not found (CUDA_HOME, PATH, /usr/local/cuda, nvidia-cuda-nvcc)"
    except ImportError:
        if shutil.which("nvcc") is None:
            return False, "nvcc not found on PATH"
    import torch

    if not torch.cuda.is_available():
        return False, "no CUDA GPU visible to PyTorch"
    return True, f"GPU {torch.cuda.get_device_name()} and nvcc found"


def resolve_backend(backend: str) -> tuple[str, str]:
    """(backend, why): ``auto`` means cutlass when a GPU and nvcc are present, else interpreter."""
    if backend != "auto":
        return backend, "chosen with --backend"
    ok, why = gpu_available()
    return ("cutlass", why) if ok else ("interpreter", f"{why}: timings are model estimates")
