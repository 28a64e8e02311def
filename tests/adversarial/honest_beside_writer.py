"""Control: a plain correct ModelNew judged while another process of the same user (the test itself,
standing in for a build, a recorder or a developer) writes a file into the project tree. The
candidate writes nothing; a judge that blames every write it sees during the attempt on the
candidate rejects it (containment) and deletes the other process's file."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
