"""Sealed calls: a bound on a candidate's time per call, taken by the judge's clock, that no code in the
candidate's process can lower.

The in-process timing (``evals.judge.timing``) runs where the kernels run, so a candidate that rewrites the
harness's code there can make it report anything. Sealed calls do not trust that process at all:

1. stage (untimed): the judge sends K fresh input sets, each tensor *masked*: its bytes XORed with
   noise that a generator draws from a seed the candidate has not seen (exact: the unmask restores
   every bit). Masked values are uniformly random bits, so no work on them can start early.
2. go (timed by ``time.perf_counter`` in the judge, from sending the request to reading the reply):
   the request carries the mask seeds and a checksum seed; the candidate process unmasks set k,
   calls the forward, keeps the outputs, and after the K calls replies with one checksum per call: a
   weighted sum of its outputs, with weights drawn from the checksum seed on the device.
3. fetch (untimed): the outputs of the K calls come back; the judge checks every one against its
   reference (``timed_call_wrong``) and every checksum against its own float64 weighted sum of the
   fetched outputs (``timing_tampered``): the outputs compared are the ones the go request computed.

The work of K calls therefore happened between the judge's two clock readings: ``U = wall(go) / K``
minus the cost of the unmask and checksum passes at the device's bandwidth (its physics floor) is an
upper bound on the time of one call, whatever code ran. A reported time ``t < ALPHA * U - beta`` is a
lie (``timing_tampered``). This module holds the pure parts: masking, seeds, checksums, the choice of
K, the bound and the rule; ``evals.judge.process`` (judge) and ``evals.judge.candidate`` call them.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import torch

ALPHA = 0.5  # a reported time under half of the judge-clocked bound (less beta) is flagged
# per call: host launch and loop overhead the go request adds, and on the CPU what an honest call costs the passes
# around it beyond the bare passes the floor times (its fresh outputs, the caches it takes: about 40 us on a 32 us
# Linear, which was flagged about one run in three with 1 us). The floor itself stays the bare passes: one timed
# around the reference's calls let a memo through (a cheat's calls cost the passes less than an honest one's).
BETA_US = {"cuda": 20.0, "cpu": 20.0}
TARGET_US = 5000.0  # K calls span at least this much time (of the reported or the I/O floor's)
K_MIN, K_MAX = 3, 200
REPEATS = {"cuda": 3, "cpu": 5}  # go requests at most (fresh sets each) before a time is flagged
MAX_STAGED_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}  # device memory for the staged sets, outputs, weights
# of the sum of |weight * output|: the candidate rounds each product to float32 (at most half an ulp, 6e-8)
# and sums in float64, so any order of summation agrees far inside this
CHECKSUM_RTOL = 1e-6
# per call, passes over the bytes: inputs (noise written; masked and noise read, input written) and
# outputs (copied out: read, written; checksum: weights written, product written, then read twice)
INPUT_PASSES, OUTPUT_PASSES = 4, 7
METHOD_NOTE = ("sealed calls: K masked input sets unmasked, called and checksummed inside one request timed by the "
               "judge's clock; U = wall / K less the unmask and checksum passes at the device's bandwidth bounds the "
               "time of one call; a reported time under alpha * U - beta is timing_tampered")


def seed() -> int:
    """A fresh seed from the judge's entropy (63 bits: every generator accepts it)."""
    return int.from_bytes(os.urandom(8), "little") & 0x7FFF_FFFF_FFFF_FFFF


# ---------------------------------------------------------------------------------------------
# Masking: XOR on the bit pattern (exact for every dtype)


def word_dtype(nbytes: int) -> torch.dtype:
    """The widest integer a tensor of ``nbytes`` bytes can be viewed as."""
    return torch.int32 if nbytes % 4 == 0 else torch.int16 if nbytes % 2 == 0 else torch.uint8


def words(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous tensor's bytes as a flat integer tensor of ``dtype`` (default: the widest that
    divides them); a view: writing it writes ``t``."""
    if not t.is_contiguous():
        raise ValueError("sealed calls mask contiguous tensors only")
    flat = t.reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    nbytes = flat.numel() * flat.element_size()
    if not nbytes:
        return flat.view(torch.uint8)
    return flat.view(torch.uint8).view(dtype or word_dtype(nbytes))


def set_word_dtype(stack: torch.Tensor) -> torch.dtype:
    """The word of a [K, ...] stack: the widest dividing one set's bytes (the candidate unmasks by set)."""
    return word_dtype((stack.numel() // max(int(stack.shape[0]), 1)) * stack.element_size())


def _generator(seed_value: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed_value))


def _philox_bytes(seed_value: int, n_bytes: int) -> torch.Tensor:
    """``n_bytes`` random bytes from Philox-4x64 keyed by all 64 bits of ``seed_value`` (numpy's counter-based
    generator, as CUDA's): the CPU's noise and weights. Its 64-bit words take ~2 ns each here where the CPU's
    Mersenne Twister took ~13 per 32-bit word (two draws for a 64-bit seed): the passes around each sealed call
    cost less than the call they bound, so the floor taken out of U no longer swamps it."""
    import numpy as np

    raw = np.random.Philox(key=int(seed_value) & 0xFFFF_FFFF_FFFF_FFFF).random_raw(-(-int(n_bytes) // 8))
    return torch.from_numpy(raw.view(np.uint8)[:n_bytes])


def fill_noise(seed_value: int, out: torch.Tensor) -> torch.Tensor:
    """``out`` (a contiguous integer tensor) filled with uniformly random bits drawn from ``seed_value`` on its
    device: the same seed gives the same noise in the judge and in the candidate process."""
    if out.device.type == "cpu":
        out.view(-1).view(torch.uint8).copy_(_philox_bytes(seed_value, out.numel() * out.element_size()))
        return out
    info = torch.iinfo(out.dtype)
    torch.randint(info.min, info.max + 1, out.shape, generator=_generator(seed_value, out.device), dtype=out.dtype,
                  device=out.device, out=out)
    return out


NOISE_CHUNK = 1 << 24  # words of noise drawn at a time: no noise buffer the size of an 8 GiB input


def call_noise(seed_value: int, call: int, n_words: int, buffer: torch.Tensor):
    """(start, end, noise) for each chunk of call ``call``'s ``n_words`` words: the noise of words [start, end)
    drawn into ``buffer`` (up to ``NOISE_CHUNK`` words) from its own seed, as both processes draw it."""
    for c, a in enumerate(range(0, n_words, NOISE_CHUNK)):
        b = min(n_words, a + NOISE_CHUNK)
        yield a, b, fill_noise(chunk_seed(seed_value, call, c), buffer[:b - a])


def mask(stack: torch.Tensor, seed_value: int, inplace: bool = False) -> torch.Tensor:
    """A masked copy of ``stack`` (K input sets' tensors of one position, stacked [K, ...]; same dtype
    and shape): its bits XOR the noise of ``seed_value``, drawn as the candidate draws it. ``inplace``: ``stack``
    itself masked (a contiguous one whose values are not needed again: an 8 GiB set is not held twice)."""
    src = stack if inplace else stack.contiguous()
    out = src if inplace else torch.empty_like(src, memory_format=torch.contiguous_format)
    if src.numel():
        dtype = set_word_dtype(src)
        k = int(src.shape[0])
        w_src, w_out = words(src, dtype).view(k, -1), words(out, dtype).view(k, -1)
        buffer = torch.empty(min(w_src.shape[1], NOISE_CHUNK), dtype=dtype, device=src.device)
        for call in range(k):
            for a, b, noise in call_noise(seed_value, call, w_src.shape[1], buffer):
                torch.bitwise_xor(w_src[call, a:b], noise, out=w_out[call, a:b])
    return out


def unmask(stack: torch.Tensor, seed_value: int) -> torch.Tensor:
    """The inverse of ``mask`` (XOR is its own inverse)."""
    return mask(stack, seed_value)


# ---------------------------------------------------------------------------------------------
# Checksums


def fill_weights(seed_value: int, out: torch.Tensor) -> torch.Tensor:
    """Checksum weights (float32) from ``seed_value`` on ``out``'s device: standard normal on a GPU, uniform in
    [-1, 1) from Philox words on the CPU. They are unknown until the go request, and independent per call (a
    weight vector shared by all calls would let a linear problem's checksums come from one product instead of K)."""
    if out.device.type == "cpu":
        words = _philox_bytes(seed_value, out.numel() * 4).view(torch.int32)
        torch.mul(words, 2.0 ** -31, out=out.view(-1))
        return out
    torch.randn(out.shape, generator=_generator(seed_value, out.device), dtype=torch.float32, device=out.device,
                out=out)
    return out


CHECKSUM_CHUNK = 1 << 24  # elements of one output weighed at a time: the weights never take a whole output


def output_seed(checksum_seed: int, position: int) -> int:
    """The weights' seed of output ``position`` (each output its own stream)."""
    return (int(checksum_seed) + 0x9E37_79B9 * (position + 1)) & 0x7FFF_FFFF_FFFF_FFFF


def chunk_seed(seed_value: int, call: int, chunk: int) -> int:
    """The seed of call ``call``'s weights for elements [chunk * CHECKSUM_CHUNK, ...) of one output position
    (independent per call: a weight vector shared by the calls would let a linear problem's K checksums come
    from one product)."""
    return (int(seed_value) + 0x85EB_CA6B * (call + 1) + 0xC2B2_AE35 * (chunk + 1) * 0x1_0000_0001) & 0x7FFF_FFFF_FFFF_FFFF


def _as_float(t: torch.Tensor) -> torch.Tensor:
    """Values as float32 for the checksum."""
    return t if t.dtype == torch.float32 else t.to(torch.float32)


def flat_range(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """Elements [a, b) of ``t`` in row-major order, flat: a view of a contiguous tensor; of another (a channels-last
    output) only the rows holding them made contiguous, descending into a row where one row holds them all (the
    whole of a 4 GiB channels-last output copied at once was most of a sealed call's time)."""
    if t.is_contiguous():
        return t.reshape(-1)[a:b]
    while t.dim() > 1 and t.shape[0] == 1:
        t = t[0]
    if t.dim() <= 1:
        return t.contiguous().reshape(-1)[a:b]
    row = t.numel() // max(int(t.shape[0]), 1)
    r0, r1 = a // row, -(-b // row)
    if r1 - r0 == 1 and row > 2 * (b - a):
        return flat_range(t[r0], a - r0 * row, b - r0 * row)
    return t[r0:r1].contiguous().reshape(-1)[a - r0 * row:b - r0 * row]


def memory_order(t: torch.Tensor) -> list[int]:
    """The dims of ``t`` from its outermost in memory to its innermost (largest stride first; a dim of size 1 where
    it stands): ``t.permute(order)`` is a contiguous view of a dense tensor in any layout (channels-last too)."""
    dims = list(range(t.dim()))
    return sorted(dims, key=lambda d: (-int(t.stride(d)) if t.shape[d] > 1 else 0, d)) if t.dim() else dims


def valid_order(order, ndim: int) -> list[int] | None:
    """``order`` when it is a permutation of ``range(ndim)`` (a candidate's reply is checked), else None."""
    if not isinstance(order, (list, tuple)) or len(order) != ndim:
        return None
    try:
        out = [int(d) for d in order]
    except (TypeError, ValueError):
        return None
    return out if sorted(out) == list(range(ndim)) else None


def in_order(t: torch.Tensor, order: list[int] | None) -> torch.Tensor:
    """``t`` with its dims in ``order`` (None: as it is)."""
    return t.permute(order) if order is not None and order != list(range(t.dim())) else t


def _chunk_weights(stack: torch.Tensor, seed_value: int, weights: torch.Tensor, order: list[int] | None = None):
    """(call, part of the call's flat output, its weights) for each chunk of each call of a [K, ...] stack, the
    weights drawn chunk by chunk from ``seed_value`` into ``weights`` (a buffer of up to ``CHECKSUM_CHUNK``).
    ``order``: the dims of one call's output in the order its elements are weighed (the candidate's memory
    order, named at the stage request: a channels-last output is weighed as it lies, not copied row by row; the
    weights are as secret in any order)."""
    k = stack.shape[0]
    n = stack.numel() // max(int(k), 1)
    for call in range(k):
        one = in_order(stack[call], order)
        for c, a in enumerate(range(0, n, CHECKSUM_CHUNK)):
            b = min(n, a + CHECKSUM_CHUNK)
            yield call, flat_range(one, a, b), fill_weights(chunk_seed(seed_value, call, c), weights[:b - a])


def weighed(stack: torch.Tensor, seed_value: int, weights: torch.Tensor, products: torch.Tensor,
            out: torch.Tensor, order: list[int] | None = None) -> None:
    """The candidate's checksums: ``out[k] += sum(stack[k] * weights)``, each product rounded to float32 (into
    ``products``) and summed in float64."""
    for call, part, w in _chunk_weights(stack, seed_value, weights, order):
        torch.mul(_as_float(part), w, out=products[:part.numel()])
        out[call] += products[:part.numel()].sum(dtype=torch.float64)


def expected_checksums(outputs: list[torch.Tensor], checksum_seed: int,
                       orders: list | None = None) -> tuple[list[float], list[float]]:
    """The judge's float64 checksums of the K calls' outputs (``outputs[o]``: output position o of every
    call, stacked [K, ...]) and, per call, the sum of |weight x output| that bounds rounding; ``orders[o]``: the
    order output o's elements were weighed in (the stage reply's)."""
    k = outputs[0].shape[0] if outputs else 0
    device = outputs[0].device if outputs else torch.device("cpu")
    sums = torch.zeros(k, dtype=torch.float64, device=device)
    scales = torch.zeros(k, dtype=torch.float64, device=device)
    for o, stack in enumerate(outputs):
        weights = torch.empty(min(max(stack.numel() // max(k, 1), 1), CHECKSUM_CHUNK), dtype=torch.float32,
                              device=stack.device)
        order = orders[o] if orders else None
        for call, part, w in _chunk_weights(stack, output_seed(checksum_seed, o), weights, order):
            prod = _as_float(part).double() * w.double()
            sums[call] += prod.sum()
            scales[call] += prod.abs_().sum()
    return sums.cpu().tolist(), scales.cpu().tolist()


def checksums_agree(reported, expected: list[float], scales: list[float], rtol: float = CHECKSUM_RTOL) -> list[int]:
    """The calls whose reported checksum differs from the judge's beyond rounding (empty: all agree).
    Where the outputs hold NaN or inf both sums are non-finite and agree: those outputs are judged by
    the comparison with the reference (a non-finite value where it is finite is wrong there)."""
    if not isinstance(reported, (list, tuple)) or len(reported) != len(expected):
        return list(range(len(expected)))
    bad = []
    for i, (r, e, s) in enumerate(zip(reported, expected, scales)):
        if not isinstance(r, (int, float)) or isinstance(r, bool):
            bad.append(i)
        elif not (math.isfinite(e) and math.isfinite(s)):
            if math.isfinite(r):
                bad.append(i)
        elif not math.isfinite(r) or abs(r - e) > rtol * s + 1e-30:
            bad.append(i)
    return bad


# ---------------------------------------------------------------------------------------------
# The candidate's side: staged sets, and the go request's loop


@dataclass
class Staged:
    """One stage request, as the candidate process holds it: per input position the masked sets
    stacked [K, ...] and a noise buffer; per output position a stack for the K outputs, the
    checksum weights and a product buffer. Everything the go request writes is allocated here."""

    k: int
    masked: list  # per input position: a [K, ...] tensor, or a plain value passed as is
    noise: list  # per input position: an integer buffer [K, words] (None for a plain value)
    outputs: list[torch.Tensor]
    weights: list[torch.Tensor]
    products: list[torch.Tensor]
    checksums: torch.Tensor = field(default=None)
    orders: list = field(default=None)  # per output position: the order its elements are weighed in (None: as laid)

    @classmethod
    def allocate(cls, masked: list, out_specs: list, device, orders: list | None = None) -> "Staged":
        k = next(int(m.shape[0]) for m in masked if isinstance(m, torch.Tensor))
        noise = []
        for m in masked:
            if isinstance(m, torch.Tensor) and m.numel():
                w = words(m, set_word_dtype(m))
                noise.append(torch.zeros(min(w.numel() // k, NOISE_CHUNK), dtype=w.dtype, device=device))
            else:
                noise.append(None)
        outputs, weights, products = [], [], []
        orders = list(orders) if orders else [None] * len(out_specs)
        for (shape, dtype_name), order in zip(out_specs, orders):
            dtype = getattr(torch, dtype_name)
            # written now (untimed): the go request must not pay for first touches of fresh memory; one call's
            # outputs are the timed call's own (run_go), so a large output is not held twice; each call's slot laid
            # out as the timed output is (its copy in is then a plain one, its checksum reads it as it lies)
            outputs.append(_stack_in_order(k, list(shape), dtype, device, order) if k > 1 else None)
            numel = min(max(math.prod(shape), 1), CHECKSUM_CHUNK)
            weights.append(torch.zeros(numel, dtype=torch.float32, device=device))
            products.append(torch.zeros(numel, dtype=torch.float32, device=device))
        return cls(k=k, masked=masked, noise=noise, outputs=outputs, weights=weights, products=products,
                   checksums=torch.zeros(k, dtype=torch.float64, device=device), orders=orders)


def _stack_in_order(k: int, shape: list[int], dtype, device, order: list[int] | None) -> torch.Tensor:
    """A zeroed [K, *shape] stack whose every [shape] slot has its dims laid out in ``order`` (outermost first)."""
    if order is None or order == list(range(len(shape))):
        return torch.zeros([k, *shape], dtype=dtype, device=device)
    where = {d: i for i, d in enumerate(order)}
    laid = torch.zeros([k, *[shape[d] for d in order]], dtype=dtype, device=device)
    return laid.permute([0, *[1 + where[d] for d in range(len(shape))]])


def run_go(staged: Staged, entries: list[dict], mask_seeds: list[int], checksum_seed: int) -> torch.Tensor:
    """The go request's work: for each call k, unmask set k into the inputs of ``entries[k % n]`` (the
    timed calls' buffers: a captured graph or an eager call), run it, copy its outputs out; then the
    checksums of all K calls. Returns them [K] (float64, on the device; the caller synchronizes)."""
    # the word views once, not per call: the loop below is inside the time the judge's clock bounds
    masked = [None if n is None else words(m, n.dtype).view(staged.k, -1) for m, n in zip(staged.masked, staged.noise)]
    targets = [[None if n is None else words(e["inputs"][p], n.dtype) for p, n in enumerate(staged.noise)]
               for e in entries]
    for k in range(staged.k):
        entry = entries[k % len(entries)]
        for p, (m, buffer, target) in enumerate(zip(masked, staged.noise, targets[k % len(entries)])):
            if buffer is not None:
                for a, b, noise in call_noise(mask_seeds[p], k, m.shape[1], buffer):
                    torch.bitwise_xor(m[k, a:b], noise, out=target[a:b])
        entry["run"]()
        outs = entry["outputs"]()
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        if staged.k == 1:  # nothing runs between this call and the fetch: its outputs are the ones fetched
            staged.outputs = [out.unsqueeze(0) for out in outs]
            break
        for stack, out in zip(staged.outputs, outs):
            stack[k].copy_(out)
    staged.checksums.zero_()
    orders = staged.orders or [None] * len(staged.outputs)
    for o, (stack, w, prod, order) in enumerate(zip(staged.outputs, staged.weights, staged.products, orders)):
        weighed(stack, output_seed(checksum_seed, o), w, prod, staged.checksums, order)
    return staged.checksums


# ---------------------------------------------------------------------------------------------
# The judge's side: K, the physics floor, the bound and the rule


def choose_k(t_us: float, floor_us: float, set_bytes: int, device_type: str) -> int:
    """Calls in one go request: enough that K * max(t, floor) spans ``TARGET_US``, within
    [K_MIN, K_MAX] and the staged memory cap (``set_bytes``: one call's staged bytes)."""
    per_call = max(float(t_us or 0.0), float(floor_us or 0.0), 1.0)
    k = math.ceil(TARGET_US / per_call)
    cap = MAX_STAGED_BYTES.get(device_type, MAX_STAGED_BYTES["cpu"]) // max(int(set_bytes), 1)
    return int(max(1, min(K_MAX, max(K_MIN, k), cap)))


def staged_bytes(input_bytes: int, output_bytes: int, output_numel: int) -> int:
    """Device memory one call's sets need: masked inputs and noise, outputs (weights and products take one
    chunk whatever K)."""
    return 2 * int(input_bytes) + int(output_bytes)


def overhead_bytes(input_bytes: int, output_numel: int, output_bytes: int) -> int:
    """Bytes the unmask and checksum passes move per call (at least: L2 hits aside)."""
    return INPUT_PASSES * int(input_bytes) + 2 * int(output_bytes) + 5 * 4 * int(output_numel)


def bandwidth_gbps(device_name: str | None) -> float | None:
    """The device's DRAM bandwidth from sol_models' hardware data (its calibrated value where one is
    saved), matched by name; None when no entry matches. Several matches: the highest (a smaller
    floor only makes the bound looser)."""
    if not device_name:
        return None
    from sol_models.hardware import get_gpu, known_gpus

    name = device_name.lower().replace("-", " ").replace("_", " ")
    found = []
    for gpu in known_gpus():
        head = gpu.split("_")[0]
        if head and head in name.split():
            try:
                found.append(float(get_gpu(gpu).dram_bw_gbps))
            except Exception:  # noqa: BLE001 - an unreadable calibration: that entry does not count
                continue
    return max(found) if found else None


def floor_us(nbytes: int, gbps: float | None) -> float:
    """The time ``nbytes`` take at ``gbps`` (0 without a bandwidth)."""
    return float(nbytes) / (float(gbps) * 1e9) * 1e6 if gbps else 0.0


def bound_us(wall_s: float, ping_s: float, k: int, floor_per_call_us: float) -> float:
    """U: the judge-clocked time of one call, an upper bound on its real time. The request's own
    round trip (a ping's) and the unmask and checksum floor are taken out."""
    return max(0.0, (float(wall_s) - float(ping_s)) * 1e6 / max(int(k), 1) - float(floor_per_call_us))


def beta_us(device_type: str, ping_s: float, k: int) -> float:
    """The rule's slack: per-call loop overhead plus one more round trip's jitter spread over K."""
    return BETA_US.get(device_type, BETA_US["cpu"]) + float(ping_s) * 1e6 / max(int(k), 1)


def tampered(t_us: float, u_us: float, beta: float, alpha: float = ALPHA) -> bool:
    """The rule: a reported time below ``alpha * U - beta`` cannot be the call's time."""
    return float(t_us) < alpha * float(u_us) - float(beta)


def rule_text(t_us: float, u_us: float, k: int, beta: float, alpha: float = ALPHA) -> str:
    return (f"reported {t_us:.1f} us per call, but {k} sealed calls took {u_us:.1f} us each by the judge's clock "
            f"(the work could not start before it; flagged under {alpha:g} x U - {beta:.0f} us)")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def measured_floor_us(inputs: list, outputs: list, k: int = 1, repeats: int = 3) -> float:
    """The unmask and checksum passes of one call among ``k`` (no forward), run in the judge's own process,
    per call, best of ``repeats``: the floor on a CPU, and on a GPU where the passes' host launches take
    longer than their bytes at the device's bandwidth (small sets). Timed on the CPU by
    this thread's CPU clock, on one thread as the candidate's calls are timed (a shared host's other work
    does not count), by the wall clock on a GPU."""

    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    k = max(1, int(k))
    clock = time.thread_time if device.type == "cpu" else time.perf_counter
    masked = [mask(x.unsqueeze(0).expand(k, *x.shape), 1) if isinstance(x, torch.Tensor) else x for x in inputs]
    staged = Staged.allocate(masked, [[list(o.shape), dtype_name(o.dtype)] for o in outputs], device)
    # unmasked into the inputs themselves: every call's seed is the mask's, so the bits written are the bits there
    # (no third copy of an 8 GiB input)
    entry = {"inputs": [x if isinstance(x, torch.Tensor) and x.is_contiguous() else
                        torch.empty_like(x) if isinstance(x, torch.Tensor) else x for x in inputs],
             "run": lambda: None, "outputs": lambda: list(outputs)}
    best = math.inf
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        for i in range(max(1, repeats)):
            t0 = clock()
            run_go(staged, [entry], [1] * len(inputs), i + 2)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, clock() - t0)
    finally:
        torch.set_num_threads(threads)
    return best * 1e6 / k


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> float | None:
    """The CPU time (seconds) of process ``pid``: every thread it ran, ended ones too (the kernel's process CPU
    clock, read from outside), plus the children it has reaped (to the clock tick). None where it is gone."""
    try:
        own = time.clock_gettime((~int(pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except (OSError, OverflowError, ValueError):
        return None
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        reaped = (int(fields[13]) + int(fields[14])) / _CLOCK_TICKS  # cutime, cstime
    except (OSError, ValueError, IndexError):
        reaped = 0.0
    return own + reaped


def tree_cpu_s(root_pid: int) -> float | None:
    """CPU time (seconds) of ``root_pid``'s descendants by the kernel's accounting: what the candidate's processes
    ran, not what they waited for a core, and every thread they ran, ended ones too (the per-live-thread counts
    missed a forward whose work ran in a thread started and joined inside the call: its bound was 0). None where
    /proc does not say."""
    total, found = 0.0, False
    stack, seen = [int(root_pid)], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if pid != root_pid:
            cpu = process_cpu_s(pid)
            if cpu is not None:
                total += cpu
                found = True
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                continue
    return total if found else None
