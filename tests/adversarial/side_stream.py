"""Runs the work on a side stream and returns without making the current stream wait for it, so a
timer that only records events on the current stream sees almost nothing. On the CPU it just
computes (there is no stream to hide behind)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401

_STREAM = {}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        if not x.is_cuda:
            return torch.relu(self.fc(x))
        stream = _STREAM.setdefault(x.device, torch.cuda.Stream(device=x.device))
        stream.wait_stream(torch.cuda.current_stream())  # inputs are ready; the return is not
        with torch.cuda.stream(stream):
            out = torch.relu(self.fc(x))
            for _ in range(4):  # extra hidden work, so the escape is far above timing noise
                out = torch.relu(self.fc(x)) + 0 * out
        return out
