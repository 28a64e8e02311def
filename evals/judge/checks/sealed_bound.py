"""The judge-clocked bound (evals.judge.sealed): K fresh input sets staged masked, then unmasked, called and
checksummed inside one request this process times, then fetched and checked. A reported time under the
bound's rule, a wrong output or a checksum that does not match the fetched outputs is a Finding."""

from __future__ import annotations

from typing import Any

import torch

from evals.judge import compare, sealed, verdicts
from evals.judge.findings import Finding

STACKED_MAX_BYTES = 256 << 20  # the K calls' references stacked for one comparison, at most


def sealed_calls(p) -> None:
    res, device, problem, judge = p.res, p.device, p.problem, p.judge
    _, x0, ref0 = p.timed_sets[0]
    t_us = float(res["median_us"])
    if not any(isinstance(x, torch.Tensor) and x.numel() for x in x0) or \
            not all(isinstance(r, torch.Tensor) for r in ref0):
        res["sealed"] = {"skipped": "no tensor inputs or a non-tensor output: nothing to mask or checksum"}
        return
    in_bytes = sum(x.numel() * x.element_size() for x in x0 if isinstance(x, torch.Tensor))
    out_bytes = sum(r.numel() * r.element_size() for r in ref0)
    out_numel = sum(r.numel() for r in ref0)
    gbps = sealed.bandwidth_gbps(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    k = sealed.choose_k(t_us, sealed.floor_us(in_bytes + out_bytes, gbps),
                        sealed.staged_bytes(in_bytes, out_bytes, out_numel), device.type)
    where = judge.problem_key(problem, device)
    judge.sealed_k[where] = k  # the next profile's sets are drawn ahead
    # the same unmask and checksum passes, timed here (the judge's process: nothing of the candidate's runs) once
    # per problem and K; on a GPU at least their bytes at the device's bandwidth, since for small sets the
    # passes' host launches, not their bytes, set their time (an honest launch-bound candidate was flagged
    # without this)
    if (where, k) not in judge.sealed_floor_us:
        # best of as many runs as go requests: a busy host's caches only lengthen a run, and a floor read too long
        # shortens U (the rewritten-timing cheat passed once on a loaded host with 3)
        judge.sealed_floor_us[(where, k)] = sealed.measured_floor_us(x0, ref0, k,
                                                                     repeats=sealed.REPEATS.get(device.type, 3))
    floor_us = judge.sealed_floor_us[(where, k)]
    if device.type == "cuda":
        floor_us = max(floor_us, sealed.floor_us(sealed.overhead_bytes(in_bytes, out_numel, out_bytes), gbps))
    info: dict[str, Any] = {"k": k, "t_us": t_us, "alpha": sealed.ALPHA, "floor_us": floor_us,
                            "bandwidth_gbps": gbps, "method": sealed.METHOD_NOTE, "bounds_us": []}
    res["sealed"] = info
    # a few go requests with fresh sets, the least disturbed one judged: the host's other work can only
    # lengthen a request, never shorten it
    # the round trip taken out of each request is the least any ping took: a ping a busy host delayed, taken out
    # whole, shortened U by its delay over K (up to 1.7 ms per call on the CPU, and the rewritten-timing cheat passed)
    least_ping_s, least_ping_cpu_s = float("inf"), float("inf")
    for _ in range(sealed.REPEATS.get(device.type, 1)):
        wall_s, ping_s, cpu_s, ping_cpu_s = sealed_go(p, x0, ref0, k)
        least_ping_s = ping_s = min(least_ping_s, ping_s)
        if ping_cpu_s is not None:
            least_ping_cpu_s = ping_cpu_s = min(least_ping_cpu_s, ping_cpu_s)
        # the judge's clock; on the CPU also the kernel's count of the candidate's processes' CPU time (a
        # shared host's waits for a core lengthen the first, not the second); the smaller bound is judged
        pairs = [(wall_s, ping_s)] + ([(cpu_s, ping_cpu_s)] if cpu_s is not None and ping_cpu_s is not None else [])
        u_us, spent_s, ping = min((sealed.bound_us(a, b, k, floor_us), a, b) for a, b in pairs)
        info["bounds_us"].append(u_us)
        if u_us == min(info["bounds_us"]):
            info.update(bound_us=u_us, wall_s=wall_s, ping_s=ping_s, cpu_s=cpu_s,
                        beta_us=sealed.beta_us(device.type, ping, k))
        if not sealed.tampered(t_us, info["bound_us"], info["beta_us"]):
            break
    u_us, beta = info["bound_us"], info["beta_us"]
    info.update(ratio=t_us / u_us if u_us > 0 else None, flagged=sealed.tampered(t_us, u_us, beta))
    p.release_timing_lock()
    if info["flagged"]:
        raise Finding(verdicts.TIMING_TAMPERED, sealed.rule_text(t_us, u_us, k, beta))


def sealed_go(p, x0: list, ref0: list, k: int) -> tuple[float, float, float | None, float | None]:
    """One stage, go and fetch of ``k`` fresh sets (taken first from the profile's pool: sets with their
    references drawn ahead of need, each used once); returns the go request's and a ping's round trip
    (seconds, from sending to the reply's arrival) and, on the CPU, the CPU time the candidate's processes spent
    in each, after checking every output and checksum."""
    judge, problem, device, attempt = p.judge, p.problem, p.device, p.attempt
    pool = p.bundle.sealed
    ready = [pool.pop(0) for _ in range(min(k, len(pool)))] if pool else []
    sets = [x for _, x, _ in ready] + judge.inputs(problem, [sealed.seed() & 0x7FFFFFFF for _ in range(k - len(ready))],
                                                   device)
    mask_seeds = [sealed.seed() for _ in x0]
    refs: list = [r for _, _, r in ready]  # the others computed while the candidate stages the sets

    def references() -> None:
        refs.extend(judge.reference(problem, p.model_seed, s) for s in sets[len(ready):])

    # one set (a large one): its references first, then its own tensors masked in place (never held twice)
    alone = k == 1
    if alone:
        references()
    with judge.stages("sealed_mask"):
        masked = [x if not isinstance(x, torch.Tensor)
                  else sealed.mask(sets[0][q].unsqueeze(0), mask_seeds[q], inplace=sets[0][q].is_contiguous()) if alone
                  else sealed.mask(torch.stack([s[q] for s in sets]), mask_seeds[q]) for q, x in enumerate(x0)]
    if alone:
        sets.clear()  # masked: no longer its values

    staged = attempt.request("sealed_stage", {"instance": p.inst, "masked": masked, "out_specs": [
        [list(r.shape), sealed.dtype_name(r.dtype)] for r in ref0]}, during=None if alone else references)
    # the order the candidate weighs each output in (its memory order, named before the checksum's seed exists);
    # one that is not a permutation of the output's dims is weighed as laid out (its checksums then disagree)
    named = staged.get("orders") if isinstance(staged, dict) else None
    orders = [sealed.valid_order(o, r.dim()) for o, r in zip(named, ref0)] if isinstance(named, list) and \
        len(named) == len(ref0) else None
    del masked
    cpu = (lambda: sealed.tree_cpu_s(attempt.proc.proc.pid)) if device.type == "cpu" else (lambda: None)
    c0 = cpu()
    attempt.request("ping", {})
    ping_s = float(attempt.proc.last_transfer.get("wait_s", 0.0))
    c1 = cpu()
    checksum_seed = sealed.seed()
    go = attempt.request("sealed_go", {"mask_seeds": mask_seeds, "checksum_seed": checksum_seed})
    wall_s = float(attempt.proc.last_transfer.get("wait_s", 0.0))
    c2 = cpu()
    fetched = attempt.request("sealed_fetch", {}, max_stream_bytes=k * sum(r.nbytes for r in ref0)).get("outputs")
    with judge.stages("compare"):
        if not isinstance(fetched, list) or len(fetched) != len(ref0) or any(
                type(o) is not torch.Tensor or o.dtype != r.dtype or tuple(o.shape) != (k, *r.shape)
                for o, r in zip(fetched, ref0)):
            raise Finding(verdicts.TIMED_CALL_WRONG, "the sealed calls' outputs are missing or of the wrong "
                          "type, dtype or shape")
        # on a GPU small sets' K calls are compared at once (the rules are elementwise; one read-back instead of
        # K), a failure then found call by call; large ones and the CPU's call by call (no stack of K references)
        together = device.type == "cuda" and k > 1 and k * sum(r.nbytes for r in ref0) <= STACKED_MAX_BYTES
        if not together or not compare.compare(fetched, [torch.stack([refs[i][o] for i in range(k)])
                                                         for o in range(len(ref0))], problem.tolerance)["correct"]:
            for i in range(k):
                cmp = compare.compare([o[i] for o in fetched], refs[i], problem.tolerance)
                if not cmp["correct"]:
                    raise Finding(verdicts.TIMED_CALL_WRONG, f"sealed call {i + 1} of {k}: {cmp['text']}")
        refs.clear()
        expected, scales = sealed.expected_checksums(fetched, checksum_seed, orders)
    bad = sealed.checksums_agree(go.get("checksums"), expected, scales)
    if bad:
        raise Finding(verdicts.TIMING_TAMPERED, f"the checksums the timed request replied for {len(bad)} of {k} "
                      f"sealed calls do not match their outputs: the outputs were not computed inside it")
    if None in (c0, c1, c2):
        return wall_s, ping_s, None, None
    return wall_s, ping_s, c2 - c1, c1 - c0
