import os
import shutil

import pytest


def _has_sm90_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


HAS_GPU = _has_sm90_gpu()
HAS_NVCC = shutil.which("nvcc") is not None


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA sm_90 GPU")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not HAS_NVCC:
            item.add_marker(skip_nvcc)


@pytest.fixture(scope="session", autouse=True)
def _state_dir(tmp_path_factory):
    """The seal key of run folders (graph.run_record) in a folder of the test session, never the user's; commands
    the tests start inherit it."""
    before = os.environ.get("MUCUTLASS_STATE_DIR")
    os.environ["MUCUTLASS_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        os.environ.pop("MUCUTLASS_STATE_DIR", None)
    else:
        os.environ["MUCUTLASS_STATE_DIR"] = before
