"""Pure PyTorch whose GEMM runs on another thread of its own process: forward hands the input to a fresh
thread and joins it before returning, so nothing runs after the call and no thread is left alive. A FLOP
counter is a dispatch mode of the calling thread; the other thread's operators never enter it. On a GPU the
thread launches on the caller's current stream, so a CUDA graph the harness captures holds its GEMM and every
timed and compared output is right: only attribution can catch it."""
import contextlib
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        box = {}
        stream = torch.cuda.current_stream(x.device) if x.is_cuda else None

        def work():
            with torch.no_grad(), (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()):
                box["y"] = F.linear(x, self.fc.weight, self.fc.bias)

        t = threading.Thread(target=work, name="k" + "ernel")
        t.start()
        t.join()
        return torch.relu(box["y"])
