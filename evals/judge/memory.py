"""The judge's memory plan: from a problem's footprint (one input set, its outputs, the model's parameters),
how much the judge and a candidate may hold at once, how many input sets are drawn ahead or rotated in
timing, and the candidate tree's host limit. Computed before an attempt, so a problem the judge cannot
hold fails at once with one line that says why, instead of an out-of-memory error somewhere inside a check.

What the judge holds during a validation (evals.judge.validation): input sets 1 and 2 with their references
(the repeated, in-place and reordered calls come back to them; where three references do not fit, only the
inputs, the references computed again when needed), the set being called with its reference, the output
that just arrived, and the float64 signature runs of the precision probe, one at a time, after that output
is let go (inputs, parameters and outputs in float64); everything else is reduced to statistics, a digest
and a sample of elements as it arrives (evals.judge.compare). The candidate holds its parameters, the inputs
of the call and of set 1 (for the in-place call), its output and the earlier outputs that fit its window
(evals.judge.candidate.held_outputs: their storage is checked against the next output's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GB = 1 << 30
HOST_BASE_BYTES = 3 * GB  # a candidate process with torch and a CUDA context, before any tensor of the problem
HOST_FLOOR_BYTES = 8 * GB  # the host limit is never below this (a candidate may stage tensors on the host)
JUDGE_SHARE = 0.65  # of a judge's GPU memory, for the judge process (the rest for its candidate process)
FLOAT64_RUN = 1.1  # a float64 run of the model against its inputs, parameters and outputs in float64 (its work space)
HELD_MIN_BYTES = 512 << 20  # a candidate holds earlier outputs up to this, or up to two outputs within HELD_MAX_BYTES
HELD_MAX_BYTES = 1 << 30
HOLD_REFERENCES_MAX_BYTES = 1 << 30  # a larger output's kept sets are drawn again when needed (a reference call)
PREPARED_SHARE = 0.5  # of what the judge's part leaves beside its needs, for input sets drawn ahead of need
TIMING_SETS_SHARE = 0.5  # of the candidate's part, for the sets rotated between timed calls (with their outputs)
FLOAT64_SLICED_BYTES = 2 * GB  # a float64 run's device memory at most: a slice of rows and its work space (probes)
CONTEXT_BYTES = 600 << 20  # a CUDA context and torch's workspaces, per process on the device


@dataclass(frozen=True)
class Footprint:
    """Bytes of one input set, of its outputs and of the model's parameters and buffers."""

    input_bytes: int
    output_bytes: int
    param_bytes: int
    output_numel: int = 0
    reference_work_bytes: int = 0  # a reference call's intermediates and work space beyond its outputs (measured)

    @property
    def set_bytes(self) -> int:
        return self.input_bytes + self.output_bytes


@dataclass(frozen=True)
class MemoryPlan:
    """What one attempt may hold (bytes), and the counts that follow from it."""

    footprint: Footprint
    device_bytes: int  # this judge's share of the device (judge and candidate together); 0 on the CPU
    judge_bytes: int  # the judge process's part
    candidate_bytes: int  # the candidate process's part
    judge_need_bytes: int  # what a validation holds at its peak, by the accounting above
    candidate_need_bytes: int
    prepared_bytes: int  # input sets and references drawn ahead of need, per kind of operation
    timing_sets: int  # input sets rotated between timed calls
    host_limit_bytes: int  # the candidate tree's resident host memory (0: no limit)
    hold_references: bool = True  # the kept sets keep their references (else they are computed again)
    refusal: str = ""  # why the judge cannot hold this problem (empty: it can)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["footprint"] = asdict(self.footprint)
        return out


def held_window_bytes(output_bytes: int) -> int:
    """What a candidate holds of its earlier outputs between calls (evals.judge.candidate.held_outputs): every output
    up to ``HELD_MIN_BYTES``, else the last two calls' within ``HELD_MAX_BYTES`` (a ring of two buffers shows)."""
    return max(HELD_MIN_BYTES, min(2 * output_bytes, HELD_MAX_BYTES))


def held_earlier(output_bytes: int) -> int:
    """Earlier outputs a candidate holds while it computes a call's (the same rule)."""
    return int(held_window_bytes(output_bytes) // max(output_bytes, 1))


def judge_need(fp: Footprint, hold_references: bool = True) -> int:
    """The judge's peak during a validation: the kept sets (sets 1 and 2 and the first wrong one, with their
    references; or, where they do not fit, only their seeds: inputs and references drawn again when needed), the
    set being called with its reference, the reference model, and the larger of the output that arrived and the
    float64 signature run that follows it (inputs, parameters and outputs at 8 bytes an element, and its work
    space)."""
    # kept whole: sets 1 and 2, the first wrong one and the one being called; else the set being called, or set 1
    # drawn again beside its reordered copy (inputs and reference: evals.judge.checks.dependence)
    held = (4 if hold_references else 2) * fp.set_bytes
    # the float64 copy of the model is made parameter by parameter (twice its bytes, and one rounded fp32 copy of
    # a parameter at a time); inputs and outputs in float64 with the run's own work space, a run over
    # SLICE_BYTES made a slice of rows at a time (evals.judge.probes.row_slices) or, where the model is not
    # separable so, on the host
    float64_run = min(int(FLOAT64_RUN * 2 * (fp.input_bytes + fp.output_bytes)), FLOAT64_SLICED_BYTES)
    float64_run += 3 * fp.param_bytes
    # the larger of: the output that arrived, the float64 run, a reference drawn (its output is the held set's; its
    # intermediates and libraries' work space are beside it)
    return held + fp.param_bytes + max(fp.output_bytes, float64_run, fp.reference_work_bytes) + CONTEXT_BYTES


def candidate_need(fp: Footprint) -> int:
    """The candidate's peak during a validation: parameters, two sets of inputs (set 1's, kept for the in-place
    call, and the call's), its output and the earlier ones it holds, and one more input or output for its own work
    (a candidate written as PyTorch's unfused operators holds an intermediate of the output's size; a program may
    pad or convert an input)."""
    outputs = (1 + held_earlier(fp.output_bytes)) * fp.output_bytes
    work = max(fp.output_bytes, fp.input_bytes)  # an honest program may copy an input (padded, converted) or an output
    return fp.param_bytes + 2 * fp.input_bytes + outputs + work + CONTEXT_BYTES


def plan(fp: Footprint, device_bytes: int, *, timing_sets: int = 3, host_floor_bytes: int | None = None,
         arena_bytes: int = 0, on_gpu: bool = True) -> MemoryPlan:
    """The plan for ``fp`` with ``device_bytes`` of the device for this judge (0: no device, the CPU: every
    tensor is host memory). The judge keeps its sets' references where that fits, else their seeds; the device
    share is split between the judge and its candidate by what each needs, the rest halved between them.
    ``host_floor_bytes``: the host limit's floor (None: ``HOST_FLOOR_BYTES``; 0: no limit). ``timing_sets``:
    the sets the settings ask for; fewer where they would not fit."""
    c_need, hold = candidate_need(fp), True
    j_need = judge_need(fp)
    refusal = ""
    if on_gpu and device_bytes > 0:
        if j_need + c_need > device_bytes or fp.output_bytes > HOLD_REFERENCES_MAX_BYTES:
            j_need, hold = judge_need(fp, hold_references=False), False
        if j_need + c_need > device_bytes:
            refusal = (f"the harness cannot judge this problem here: its checks need about "
                       f"{(j_need + c_need) / GB:.1f} GB of GPU memory (the judge {j_need / GB:.1f} GB, the candidate "
                       f"{c_need / GB:.1f} GB; inputs {fp.input_bytes / GB:.2f} GB, outputs {fp.output_bytes / GB:.2f} "
                       f"GB, parameters {fp.param_bytes / GB:.2f} GB), more than this judge's "
                       f"{device_bytes / GB:.1f} GB share of the GPU; run fewer judges per GPU "
                       f"(MUCUTLASS_JUDGES_PER_GPU) or give this one more (gpu_memory_gb)")
        slack = max(0, device_bytes - j_need - c_need)
        judge_bytes = min(device_bytes, j_need + slack // 2)
        cand_bytes = device_bytes - judge_bytes
        prepared = int(max(0, judge_bytes - j_need) * PREPARED_SHARE) if hold else 0
        per_timing_set = 2 * fp.set_bytes  # the set, its captured outputs
        fit = int(max(0, cand_bytes - c_need + per_timing_set) * TIMING_SETS_SHARE // max(per_timing_set, 1))
        sets = max(1, min(int(timing_sets), fit))
    else:
        judge_bytes = cand_bytes = 0
        prepared = 1 << 30
        sets = max(1, int(timing_sets))
    floor = HOST_FLOOR_BYTES if host_floor_bytes is None else int(host_floor_bytes)
    if floor == 0:
        host = 0
    else:
        # on the CPU every tensor of the candidate is host memory; on a GPU it may stage one set on the host
        held = c_need if not on_gpu else 2 * fp.set_bytes + fp.param_bytes
        host = max(floor, HOST_BASE_BYTES + arena_bytes + 2 * held)
    return MemoryPlan(footprint=fp, device_bytes=int(device_bytes), judge_bytes=judge_bytes, candidate_bytes=cand_bytes,
                      judge_need_bytes=j_need, candidate_need_bytes=c_need, prepared_bytes=prepared, timing_sets=sets,
                      host_limit_bytes=int(host), hold_references=hold, refusal=refusal)


def device_share(total_bytes: int, judges_per_gpu: int, gpu_memory_gb: float | None) -> int:
    """This judge's share of a device of ``total_bytes``: ``gpu_memory_gb`` when given, else an equal share."""
    if gpu_memory_gb:
        return int(min(total_bytes, gpu_memory_gb * GB))
    return int(total_bytes // max(1, int(judges_per_gpu)))


def nbytes(tensors) -> int:
    """Bytes of the tensors among ``tensors`` (other values count nothing)."""
    import torch

    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def numel(tensors) -> int:
    import torch

    return sum(t.numel() for t in tensors if isinstance(t, torch.Tensor))


def fraction(part_bytes: int, total_bytes: int) -> float:
    """``part_bytes`` of ``total_bytes`` as the fraction torch's allocator takes (at most 1)."""
    return min(1.0, max(part_bytes, 1) / max(total_bytes, 1)) if total_bytes else 1.0
