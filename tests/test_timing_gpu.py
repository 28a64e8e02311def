"""The timing method's CUDA graph capture on a GPU, where it fails: a model that branches on a value."""

import pytest

pytestmark = pytest.mark.gpu


def test_a_failed_capture_leaves_random_draws_on_the_gpu_working():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from evals.judge.timing import TimingMethod, make_flusher, time_candidate

    def branches_on_a_value(x):  # the host reads x.mean() inside the capture: capture fails
        return torch.relu(x) if x.mean() > 0 else x - 1.0

    device = torch.device("cuda")
    method = TimingMethod.from_settings({})
    sets = [[torch.randn(64, 64, device=device)] for _ in range(2)]
    r = time_candidate(branches_on_a_value, sets, make_flusher(device, method), method)
    assert r["method"] == "events_device_sync" and r["capture_error"], r["method"]
    # before, the default generator stayed marked as capturing and this raised
    # "Offset increment outside graph capture encountered unexpectedly"
    x = torch.randn(1024, device=device)
    assert x.std().item() > 0.5
    g = torch.cuda.CUDAGraph()  # and a later capture with a random op still works
    y = torch.empty(1024, device=device)
    with torch.cuda.graph(g):
        y.normal_()
    g.replay()
    torch.cuda.synchronize()
    assert y.std().item() > 0.5
