"""The output must follow the input: two sets whose references differ give different outputs, and the same
values in another order (first and last element, sum and shape kept) give the reordered set's answer, so a
cache keyed by the inputs' address or by a cheap digest of their content answers wrong."""

from __future__ import annotations

import torch

from evals.judge import compare, verdicts
from evals.judge.findings import Finding


def outputs_follow_inputs(v) -> None:
    first = v.sets[0]
    for i, rec in enumerate(v.sets[1:], start=1):
        if compare.same(first.summary, rec.summary) and not compare.samples_close(first.ref_sample, rec.ref_sample,
                                                                                  v.tol):
            raise Finding(verdicts.INPUT_INDEPENDENT, f"input sets 1 and {i + 1} give the same output (the reference's "
                          f"differ): the result does not follow the input")


def reordered_values(v) -> None:
    """Set 1's values in two other orders (first and last kept), each called where its reference differs: a
    random interior permutation, then the interior rotated by one place. A digest that sums the values in
    floating point sees a reordered sum that rounds differently now and then (about one draw in fifteen on a
    million values, by the candidate's own reduction order); two orders, the second one that moves every
    value and keeps most partial sums, leave it one chance in hundreds."""
    x0, _ = v.kept(0)
    shuffled = v.bundle.shuffled
    v.bundle.shuffled = None
    if shuffled is None:
        with v.judge.stages("reference"):
            xs = interior_permutation(x0)
        shuffled = (xs, v.judge.reference(v.problem, v.model_seed, xs) if xs is not None else None)
    _check_reordered(v, *shuffled, "values reordered")
    del shuffled
    with v.judge.stages("reference"):
        xr = interior_rotation(x0)
    if xr is not None:
        _check_reordered(v, xr, v.judge.reference(v.problem, v.model_seed, xr), "interior rotated by one place")


def _check_reordered(v, xs, ref_sh, how: str) -> None:
    if xs is None:
        return
    with v.judge.stages("compare"):
        differs = not compare.samples_close(v.keys.sample(ref_sh), v.sets[0].ref_sample, v.tol)
    if not differs:
        return
    outs = v.attempt.call(v.inst, xs, ref_sh)
    with v.judge.stages("compare"):
        cmp = compare.summarize(outs, ref_sh, v.tol, None).cmp
    if not cmp["correct"]:
        raise Finding(verdicts.INPUT_INDEPENDENT, f"wrong on input set 1 with its {how} (first and last values, "
                      f"sum and shape kept): the result is cached by a digest of the content; {cmp['text']}")


def _each_float_tensor(inputs: list, reorder):
    """The inputs with ``reorder`` applied to every float tensor of 4 elements or more (None when there is none)."""
    out = [reorder(x) if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() >= 4 else x
           for x in inputs]
    return out if any(o is not x for o, x in zip(out, inputs)) else None


def interior_rotation(inputs: list):
    """The inputs with every float tensor's values between its first and last moved one place on (None when no
    tensor is large enough)."""
    def rotated(x):
        src, flat = x.reshape(-1), torch.empty_like(x.reshape(-1))  # one copy: no roll's temporary
        flat[0], flat[-1] = src[0], src[-1]
        flat[2:-1] = src[1:-2]
        flat[1] = src[-2]
        return flat.reshape(x.shape)

    return _each_float_tensor(inputs, rotated)


PERMUTED_BLOCK_ELEMENTS = 1 << 24  # a larger tensor's interior is reordered block by block (one index of 128 MB)


def interior_permutation(inputs: list):
    """The inputs with every float tensor's values reordered except its first and last (None when no tensor is
    large enough). A tensor over ``PERMUTED_BLOCK_ELEMENTS`` is reordered within blocks of that many (one drawn
    order for all of them, the last block its own): an 8 GiB input's whole permutation would be a 16 GiB index."""
    import os

    def permuted(x):
        flat = x.reshape(-1).clone()
        n = flat.numel()
        # drawn where the values are (a GPU draws millions in a millisecond, a CPU in a fraction of a second)
        g = torch.Generator(device=flat.device).manual_seed(int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF)
        block = min(n - 2, PERMUTED_BLOCK_ELEMENTS)
        perm = torch.randperm(block, generator=g, device=flat.device)
        for a in range(1, n - 1, block):
            b = min(n - 1, a + block)
            p = perm if b - a == block else torch.randperm(b - a, generator=g, device=flat.device)
            flat[a:b] = flat[a:b][p]
        return flat.reshape(x.shape)

    return _each_float_tensor(inputs, permuted)
