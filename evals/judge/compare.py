"""Outputs against the reference, in chunks, reduced to what the judge keeps of a call.

A call's outputs are compared with the reference as they arrive (``atol = rtol`` = the problem's tolerance,
non-finite values where the reference is finite counted apart), in slices of ``CHUNK_ELEMENTS`` so that no
float64 copy of a whole output is ever made, and then reduced to a ``Summary``: the comparison's numbers,
a digest of the values (two calls gave the same output exactly when their digests agree) and the values at
a sample of positions (every element of a small output) that the precision probes and the checks between
calls read. The positions and the digest's weights are drawn for each operation from the judge's own
randomness (``Keys``) and never leave the judge, so a candidate cannot tell which of its elements are kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from evals.judge import verdicts

CHUNK_ELEMENTS = 1 << 24  # per reduction step: float64 temporaries of 128 MB at most
WEIGHTS_KEPT_ELEMENTS = 1 << 20  # digest weights kept between calls up to this many per chunk (8 MB)


def _seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & 0x7FFF_FFFF_FFFF_FFFF


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1)


def at_positions(t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``t``'s values at flat (row-major) ``positions``, without a copy of a tensor that is not contiguous."""
    positions = positions.to(t.device)
    if t.is_contiguous():
        return t.reshape(-1)[positions]
    return t[torch.unravel_index(positions, t.shape)]


def _chunks(n: int, size: int = CHUNK_ELEMENTS):
    for a in range(0, n, size):
        yield a, min(n, a + size)


class Keys:
    """One operation's secrets for its outputs: per output position the sorted sample positions (all of a
    small output) and a seed for the digest's weights."""

    def __init__(self, refs: list, sample_elements: int):
        self.digest_seed = _seed()
        self.positions: list[torch.Tensor | None] = []
        for r in refs:
            if not isinstance(r, torch.Tensor) or r.numel() == 0:
                self.positions.append(None)
                continue
            n = r.numel()
            if n <= sample_elements:
                self.positions.append(torch.arange(n, device=r.device))
            else:
                g = torch.Generator(device=r.device).manual_seed(_seed())
                idx = torch.randint(0, n, (int(sample_elements),), generator=g, device=r.device)
                self.positions.append(torch.unique(idx))  # sorted
        self._weights: dict[tuple[torch.device, int, int], torch.Tensor] = {}

    def weights(self, device, chunk: int, n: int) -> torch.Tensor:
        """The digest's odd int64 weights for elements [chunk * CHUNK_ELEMENTS, + n): drawn again for every call
        (a 4 GiB output's would be 8 GiB kept), kept only where they are small (one short chunk)."""
        key = (torch.device(device), chunk, n)
        if key in self._weights:
            return self._weights[key]
        g = torch.Generator(device=device).manual_seed((self.digest_seed + 0x9E37_79B9 * (chunk + 1)) & (2**63 - 1))
        w = torch.randint(-(2**62), 2**62, (n,), generator=g, device=device, dtype=torch.int64).bitwise_or_(1)
        if n <= WEIGHTS_KEPT_ELEMENTS:
            self._weights[key] = w
        return w

    def sample(self, outs: list) -> list:
        """The values of ``outs`` at the sample positions, float64 (None where there is no tensor)."""
        out = []
        for o, pos in zip(outs, self.positions):
            if pos is None or not isinstance(o, torch.Tensor):
                out.append(None)
            else:
                out.append(at_positions(o, pos).double())
        return out


@dataclass
class Summary:
    """What the judge keeps of one call's outputs."""

    cmp: dict  # correct, max_abs_error, max_rel_error, rule, text (as ``compare``)
    digest: tuple  # per output: dtype, shape and a keyed sum of its canonical values
    sample: list  # per output: float64 values at the sample positions
    nonfinite: bool = False  # a NaN or an infinity anywhere in the outputs
    has_nan: bool = False
    numel: list = field(default_factory=list)


def _words(chunk: torch.Tensor) -> torch.Tensor:
    """A chunk's values as int64 words for the digest: floats canonical first (-0.0 as 0.0, one NaN)."""
    if chunk.is_floating_point():
        chunk = torch.where(torch.isnan(chunk), torch.full_like(chunk, float("nan")), chunk + 0.0)
        return chunk.view(torch.int16 if chunk.element_size() == 2 else torch.int32 if chunk.element_size() == 4
                          else torch.int64 if chunk.element_size() == 8 else torch.uint8).to(torch.int64)
    if chunk.is_complex():
        return _words(torch.view_as_real(chunk).reshape(-1))
    if chunk.dtype == torch.bool:
        return chunk.to(torch.int64)
    return chunk.to(torch.int64)


def _stats(o: torch.Tensor, r: torch.Tensor, tol: float, keys: Keys | None, chunk_base: int):
    """[non-finite where the reference is finite, max abs error, max rel error, elements not close, any
    non-finite, any NaN] as float64 on the device, and the digest's sum as int64 (no read back)."""
    dev = r.device
    n_nonfinite = torch.zeros((), dtype=torch.float64, device=dev)
    max_abs = torch.zeros((), dtype=torch.float64, device=dev)
    max_rel = torch.zeros((), dtype=torch.float64, device=dev)
    n_far = torch.zeros((), dtype=torch.float64, device=dev)
    any_nonfinite = torch.zeros((), dtype=torch.float64, device=dev)
    any_nan = torch.zeros((), dtype=torch.float64, device=dev)
    digest = torch.zeros((), dtype=torch.int64, device=dev)
    of, rf = _flat(o), _flat(r)
    floating = o.is_floating_point() or o.is_complex()
    for c, (a, b) in enumerate(_chunks(rf.numel())):
        oc, rc = of[a:b], rf[a:b]
        if floating:
            finite_r = torch.isfinite(rc)
            finite_o = torch.isfinite(oc)
            n_nonfinite += (finite_r & ~finite_o).sum()
            any_nonfinite = torch.maximum(any_nonfinite, (~finite_o).any().double())
            any_nan = torch.maximum(any_nan, torch.isnan(oc).any().double())
            rd = rc.double()
            diff = (oc.double() - rd).abs_().masked_fill_(~finite_r, 0.0)
            max_abs = torch.maximum(max_abs, diff.max())
            max_rel = torch.maximum(max_rel, diff.div_(rd.abs_().clamp_min_(1e-12)).max())
            del diff, rd
        else:
            diff = (oc.double() - rc.double()).abs_()
            max_abs = torch.maximum(max_abs, diff.max())
            max_rel = torch.maximum(max_rel, diff.div_(rc.double().abs_().clamp_min_(1e-12)).max())
            del diff
        n_far += (~torch.isclose(oc, rc, atol=tol, rtol=tol, equal_nan=True)).sum()
        if keys is not None:
            w = keys.weights(dev, chunk_base + c, b - a)
            digest += (_words(oc) * w).sum()
    return torch.stack([n_nonfinite, max_abs, max_rel, n_far, any_nonfinite, any_nan]), digest


def compare(outs: list, refs: list, tol: float) -> dict:
    """Outputs against the reference: a non-finite value where the reference is finite (``nonfinite``), then
    any element outside ``atol = rtol = tol`` (``mismatch``); with the largest absolute and relative errors."""
    return summarize(outs, refs, tol, None).cmp


def summarize(outs: list, refs: list, tol: float, keys: Keys | None) -> Summary:
    """``compare``'s verdict on ``outs`` and, with ``keys``, the digest and the sample of the outputs. The
    statistics of every output are reduced on its device and read back once."""
    stats, digests = [], []
    for p, (o, r) in enumerate(zip(outs, refs)):
        s, d = _stats(o.to(r.device), r, tol, keys, chunk_base=p << 32)
        stats.append(s)
        digests.append(d)
    values = torch.stack([t.to(stats[0].device) for t in stats]).tolist() if stats else []
    sums = torch.stack([d.to(digests[0].device) for d in digests]).tolist() if digests else []
    cmp = dict(correct=True, max_abs_error=0.0, max_rel_error=0.0, rule=None, text="")
    max_abs = max_rel = 0.0
    for i, ((n_nonfinite, o_abs, o_rel, n_far, _, _), o) in enumerate(zip(values, outs)):
        if n_nonfinite:
            cmp = dict(correct=False, max_abs_error=None, max_rel_error=None, rule=verdicts.NONFINITE,
                       text=f"output {i} has {int(n_nonfinite)} non-finite values where the reference is finite")
            break
        max_abs, max_rel = max(max_abs, o_abs), max(max_rel, o_rel)
        if n_far:
            cmp = dict(correct=False, max_abs_error=max_abs, max_rel_error=max_rel, rule=verdicts.MISMATCH,
                       text=f"output {i}: {int(n_far)} of {o.numel()} elements differ from the reference beyond "
                            f"atol = rtol = {tol:g} (max abs error {max_abs:.3g})")
            break
    else:
        cmp.update(max_abs_error=max_abs, max_rel_error=max_rel)
    digest = tuple((str(o.dtype), tuple(o.shape), s) for o, s in zip(outs, sums))
    return Summary(cmp=cmp, digest=digest, sample=keys.sample(outs) if keys is not None else [],
                   nonfinite=any(v[4] for v in values), has_nan=any(v[5] for v in values),
                   numel=[o.numel() for o in outs])


def same(a: Summary, b: Summary) -> bool:
    """The same outputs, element for element (``torch.equal``: NaN equals nothing)."""
    return a.digest == b.digest and not (a.has_nan or b.has_nan)


def same_or_both_nan(a: Summary, b: Summary) -> bool:
    """The same outputs, a NaN where the other has a NaN counting as equal."""
    return a.digest == b.digest


def samples_close(a: list, b: list, tol: float) -> bool:
    """Whether two samples (of two calls' outputs, or of two references) agree within ``atol = rtol = tol``."""
    return len(a) == len(b) and all(
        (x is None) == (y is None) and (x is None or (x.shape == y.shape and torch.allclose(
            x, y.to(x.device), atol=tol, rtol=tol))) for x, y in zip(a, b))


def check_outputs(outs, problems, n_outputs, refs) -> list:
    """The outputs a reply carries, as the judge requires them: as many as the reference's, each a plain tensor
    of the reference's dtype and shape (else a ``Finding`` of ``output_type``)."""
    from evals.judge.findings import Finding

    if n_outputs != len(refs) or not isinstance(outs, list):
        raise Finding(verdicts.OUTPUT_TYPE, f"returns {n_outputs} output(s), the reference returns {len(refs)}")
    for text in problems or []:
        if text:
            raise Finding(verdicts.OUTPUT_TYPE, text)
    for i, (o, r) in enumerate(zip(outs, refs)):
        if type(o) is not torch.Tensor:
            raise Finding(verdicts.OUTPUT_TYPE, f"output {i} is not a plain tensor ({type(o).__name__})")
        if o.dtype != r.dtype:
            raise Finding(verdicts.OUTPUT_TYPE, f"output {i} has dtype {o.dtype}, expected {r.dtype}")
        if tuple(o.shape) != tuple(r.shape):
            raise Finding(verdicts.OUTPUT_TYPE, f"output {i} has shape {list(o.shape)}, expected {list(r.shape)}")
    return outs


def _bit_words(flat: torch.Tensor) -> torch.Tensor:
    """A flat tensor's exact bits as int64 words (NaN payloads and -0.0 kept: any change of a bit shows)."""
    if flat.dtype == torch.bool:
        return flat.to(torch.int64)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    size = flat.element_size()
    word = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    return flat.view(word).to(torch.int64)


def content_digests(tensors: list, seed: int) -> list:
    """Per tensor its dtype, shape and a sum of its exact bits under int64 weights drawn from ``seed`` (the same
    in the judge and in the candidate process, chunk by chunk); None for a value that is not a tensor. The
    judge compares the candidate's inputs after a call with its own copy this way, without their bytes
    crossing back."""
    out = []
    for p, t in enumerate(tensors):
        if type(t) is not torch.Tensor:
            out.append(None)
            continue
        flat = t.detach().reshape(-1)
        total = torch.zeros((), dtype=torch.int64, device=t.device)
        for c, (a, b) in enumerate(_chunks(flat.numel())):
            g = torch.Generator(device=t.device).manual_seed(
                (int(seed) + 0x9E37_79B9 * (p + 1) + 0x85EB_CA6B * (c + 1)) & (2**63 - 1))
            w = torch.randint(-(2**62), 2**62, (b - a,), generator=g, device=t.device, dtype=torch.int64)
            total += (_bit_words(flat[a:b]) * w.bitwise_or_(1)).sum()
        out.append([str(t.dtype).removeprefix("torch."), list(t.shape), int(total)])
    return out
