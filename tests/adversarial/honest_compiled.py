"""A plain correct ModelNew through torch.compile: the runtime's compile workers and their reader threads
stay alive in the process (idle while it is timed), and Triton/inductor kernels do the work."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self._compiled = torch.compile(self._forward)

    def _forward(self, x):
        return torch.relu(self.fc(x))

    def forward(self, x):
        return self._compiled(x)
