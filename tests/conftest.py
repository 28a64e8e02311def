import os
import shutil
import threading
import time

import pytest


def _has_sm90_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


HAS_GPU = _has_sm90_gpu()
HAS_NVCC = shutil.which("nvcc") is not None
# nvcc builds take about 70 s each on a two-core machine: they run when asked for (CI's second step asks)
NVCC_TESTS = os.environ.get("MUCUTLASS_NVCC_TESTS", "").strip().lower() in ("1", "true", "yes", "on")
SLOW_TEST_S = 30.0  # a test running longer gets a line on the terminal, every SLOW_TEST_S after that


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA sm_90 GPU")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc")
    opt_in = pytest.mark.skip(reason="an nvcc build (~70 s): MUCUTLASS_NVCC_TESTS=1 runs it")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not HAS_NVCC:
            item.add_marker(skip_nvcc)
        elif "nvcc" in item.keywords and not NVCC_TESTS:
            item.add_marker(opt_in)


class _SlowTestLines:
    """Says on the terminal which test is still running once it passes ``SLOW_TEST_S`` (the dots stop moving)."""

    def __init__(self, reporter):
        self.reporter, self.current, self.started, self.said = reporter, None, 0.0, 0
        self.lock = threading.Lock()
        threading.Thread(target=self._watch, name="slow-test-lines", daemon=True).start()

    def start(self, nodeid: str) -> None:
        with self.lock:
            self.current, self.started, self.said = nodeid, time.monotonic(), 0

    def stop(self) -> None:
        with self.lock:
            self.current = None

    def _watch(self) -> None:
        while True:
            time.sleep(2.0)
            with self.lock:
                if self.current is None:
                    continue
                elapsed = time.monotonic() - self.started
                if elapsed >= SLOW_TEST_S * (self.said + 1):
                    self.said += 1
                    self.reporter.write_line(f"  ... still running after {elapsed:.0f} s: {self.current}")


_slow: _SlowTestLines | None = None


def pytest_configure(config):
    global _slow
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None and not config.getoption("collectonly"):
        _slow = _SlowTestLines(reporter)


def pytest_runtest_logstart(nodeid, location):
    if _slow is not None:
        _slow.start(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    if _slow is not None:
        _slow.stop()


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
