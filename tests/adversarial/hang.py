"""Never returns: a busy loop on the CPU; on the GPU a kernel that spins for hours."""
import torch
import torch.nn as nn

# torch.cuda._sleep spins a GPU kernel for this many clock cycles: about 1.4 hours at 1.98 GHz.
_SPIN_CYCLES = 10**13


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        if x.is_cuda:
            torch.cuda._sleep(_SPIN_CYCLES)
            torch.cuda.synchronize()
            return self.fc(x)
        while True:
            pass
