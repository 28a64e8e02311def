"""The process ``timing.ncu_counters`` runs under Nsight Compute: one candidate call inside an NVTX
range, after a warm-up outside it. A module of its own, so that timing imports neither the harness
nor the worker."""

from __future__ import annotations

import json

import torch

from evals.judge.client import Candidate
from evals.problems import Problem
from evals.judge.process import Worker


def main(spec_path: str) -> int:
    """Runs one candidate call inside an NVTX range (what ``ncu_counters`` profiles)."""
    spec = json.loads(open(spec_path).read())
    problem = Problem.from_spec(spec["problem"])
    device = torch.device("cuda")
    model = Worker().candidate_factory(problem, Candidate(**spec["candidate"]).worker_view(), device)(0)
    inputs = problem.make_inputs(0, device)
    with torch.no_grad():
        model(*inputs)  # warm-up outside the range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("mucutlass_candidate")
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1]))
