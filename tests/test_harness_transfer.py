"""Tensors between the judge and the candidate go through a shared arena (evals.judge.wire.Arena), not
pickled frames: the round trip is exact, a descriptor the candidate forges cannot make the judge read
outside the arena, the candidate cannot shrink the arena under the judge's mapping, the arena never
holds the expected outputs, and the judge reports where its time goes (stages)."""

from __future__ import annotations

import os
import textwrap

import pytest
import torch

from evals.judge import wire
from evals.judge.client import Candidate
from evals.problems import load_suite
from tests.adversarial.shared import shared_harness


@pytest.fixture()
def arena():
    a = wire.Arena.create(1 << 20)
    yield a
    a.close()


def test_round_trip_is_exact_for_every_kind_of_tensor(arena):
    xs = {
        "f32": torch.randn(3, 5), "f64": torch.randn(4), "bf16": torch.randn(7).bfloat16(), "i64": torch.arange(9),
        "bool": torch.rand(6) > 0.5, "scalar": torch.tensor(2.5), "empty": torch.empty(0, 3),
        "strided": torch.randn(6, 4).t(), "u8": torch.randint(0, 255, (5,), dtype=torch.uint8),
    }
    packed, end, streams = wire.pack({"inputs": list(xs.values()), "n": 3, "text": "x"}, arena)
    assert all(isinstance(d, dict) and wire.DESCRIPTOR in d for d in packed["inputs"]) and not streams  # none in the frame
    assert end % wire.ALIGN == 0 and end <= arena.nbytes
    back = wire.unpack(packed, wire.Arena.attach(os.dup(arena.fd)))
    assert back["n"] == 3 and back["text"] == "x"
    for x, y in zip(xs.values(), back["inputs"]):
        assert y.dtype == x.dtype and y.shape == x.shape and torch.equal(y, x)
    # a copy, not a view of the arena: the next request's bytes do not change it
    arena.bytes().fill_(0)
    assert torch.equal(back["inputs"][0], xs["f32"])


def _pair():
    import socket

    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def test_a_tensor_larger_than_the_arena_streams_through_it_in_chunks(arena):
    """No tensor travels in a frame: one larger than the whole arena crosses its stream region chunk by chunk
    (the receiver pulls each chunk, the next asked for before the current one is copied out), byte for byte."""
    import threading

    big = torch.randn(arena.nbytes // 4 * 3 + 7)  # three arenas and a bit: many chunks, a short last one
    small = torch.ones(3)
    sender, receiver = _pair()
    frames = []
    real_send = wire.send

    def counting_send(sock, obj):  # every frame the sender writes is small: descriptors, never tensor bytes
        if sock is sender:
            frames.append(len(wire.encode(obj)))
        real_send(sock, obj)

    other = wire.Arena.attach(os.dup(arena.fd))
    got = {}

    def receive():
        msg = wire.recv(receiver, deadline=None)
        got["msg"] = wire.unpack(msg, other, sock=receiver, max_stream_bytes=big.nbytes)

    t = threading.Thread(target=receive)
    t.start()
    wire.send = counting_send
    try:
        wire.send_message(sender, {"x": big, "y": small, "n": 2}, arena)
    finally:
        wire.send = real_send
    t.join(30)
    assert torch.equal(got["msg"]["x"], big) and torch.equal(got["msg"]["y"], small) and got["msg"]["n"] == 2
    assert max(frames) < 4096, frames
    chunks = -(-big.nbytes // wire.chunk_bytes(arena))
    assert len(frames) == 1 + chunks  # the message, then one frame per chunk
    sender.close(), receiver.close(), other.close()


def test_a_reply_streaming_more_than_asked_for_is_a_channel_error(arena):
    big = torch.randn(arena.nbytes // 2)
    packed, _, streams = wire.pack({"x": big}, arena)
    assert streams and wire.STREAM in packed["x"]
    _, receiver = _pair()
    with pytest.raises(wire.ChannelError) as err:
        wire.unpack(packed, arena, sock=receiver, max_stream_bytes=big.nbytes - 1)
    assert err.value.rule == "channel"


def test_a_forged_chunk_is_a_channel_error(arena):
    """A sender that answers a pull with another chunk than the one asked for (or another place in the arena)."""
    import threading

    big = torch.randn(arena.nbytes // 2)
    packed, _, _ = wire.pack({"x": big}, arena)
    sender, receiver = _pair()

    def forge():
        wire.recv(sender, deadline=None)  # the pull of chunk 0
        wire.send(sender, {"chunk": [0, 1], "at": wire.inline_limit(arena), "nbytes": wire.chunk_bytes(arena)})

    t = threading.Thread(target=forge)
    t.start()
    with pytest.raises(wire.ChannelError) as err:
        wire.unpack(packed, arena, sock=receiver, max_stream_bytes=big.nbytes)
    t.join(10)
    assert err.value.rule == "channel"


@pytest.mark.parametrize("descriptor", [
    {wire.DESCRIPTOR: [0, 1 << 30], "dtype": "uint8", "shape": [1 << 30]},  # past the end
    {wire.DESCRIPTOR: [-256, 16], "dtype": "float32", "shape": [4]},  # before the start
    {wire.DESCRIPTOR: [3, 16], "dtype": "float32", "shape": [4]},  # misaligned
    {wire.DESCRIPTOR: [0, 16], "dtype": "float32", "shape": [5]},  # bytes do not match the shape
    {wire.DESCRIPTOR: [0, 16], "dtype": "object", "shape": [4]},  # not a tensor dtype
    {wire.DESCRIPTOR: [0, 16], "dtype": "float32", "shape": [-4]},
    {wire.DESCRIPTOR: "0,16", "dtype": "float32", "shape": [4]},
])
def test_a_forged_descriptor_is_a_channel_error(arena, descriptor):
    with pytest.raises(wire.ChannelError) as err:
        wire.unpack({"outputs": [descriptor]}, arena)
    assert err.value.rule == "channel"


def test_the_arena_cannot_be_shrunk_or_grown_by_the_other_side(arena):
    other = os.dup(arena.fd)  # what the candidate holds
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(other, 0)
        with pytest.raises(PermissionError):
            os.ftruncate(other, arena.nbytes * 2)
    finally:
        os.close(other)
    arena.bytes()[-1] = 7  # the judge's mapping is intact
    assert int(arena.bytes()[-1]) == 7


# ---------------------------------------------------------------------------------------------
# through the judge

HEAD = """
import os, sys
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
"""
HONEST = HEAD + "        return torch.relu(self.fc(x))\n"


@pytest.fixture(scope="module")
def problem():
    return next(p for p in load_suite("smoke") if p.name == "02_linear_relu_tiny")


@pytest.fixture(scope="module")
def harness():
    return shared_harness(device="cpu", watchdog_s=30, n_input_sets=3)


def _arena_fd_source() -> str:
    return textwrap.dedent("""
        def _arena_fd():
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if "mucutlass-arena" in os.readlink(f"/proc/self/fd/{fd}"):
                        return int(fd)
                except OSError:
                    pass
            return None
    """)


def test_honest_candidate_reports_its_stages(harness, problem):
    v = harness.validate(problem, Candidate.from_source(HONEST))
    assert v.correct, v.reason
    stages = v.info["stages"]
    assert all(seconds >= 0.0 for seconds in stages.values()), stages
    assert "snapshot" in stages, stages  # the check for written files runs on every validation, however quick
    # the candidate ran its calls, their tensors crossed the arena, and the judge compared every output
    for name in ("candidate", "transfer", "compare"):
        assert stages.get(name, 0.0) > 0.0, (name, stages)
    # the reference's work is this validation's unless its sets were drawn ahead (evals.judge.process.Prepared)
    assert stages.get("reference", 0.0) > 0.0 or v.info["prepared_sets"] == len(v.sets), (stages, v.info.get("prepared_sets"))
    # every stage is judge time inside this one request, which the caller's clock spans: only the stages'
    # rounding (to 0.1 ms each) can take their sum past it
    assert sum(stages.values()) <= v.wall_s + 0.5e-4 * len(stages), (stages, v.wall_s)


def test_candidate_that_truncates_the_arena_does_not_crash_the_judge(harness, problem):
    source = _arena_fd_source() + HEAD + textwrap.indent(textwrap.dedent("""
        fd = _arena_fd()
        assert fd is not None, "no arena descriptor"
        for size in (0, 4096):
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
        return torch.relu(self.fc(x))
    """), " " * 8)
    v = harness.validate(problem, Candidate.from_source(source))
    assert v.correct, v.reason  # the seal refused it; the judge's mapping stayed whole
    after = harness.validate(problem, Candidate.from_source(HONEST))
    assert after.correct, after.reason


def test_the_arena_never_holds_the_expected_output(harness, problem):
    """The candidate maps the whole arena and looks for the reference's output (it computes the first
    row itself, as a thief would, to recognise it): the arena holds inputs and its own replies only,
    so a stolen answer is never found and its noise fails."""
    source = _arena_fd_source() + textwrap.dedent("""
        import mmap
        import numpy as np

        def _steal(row, n_rows):
            fd = _arena_fd()
            mm = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
            used = 64 << 20
            vals = np.frombuffer(mm, dtype=np.float32, count=used // 4)
            pivot = int(np.argmax(row != 0))
            for h in np.nonzero(vals == row[pivot])[0][:64]:
                start = int(h) - pivot
                if start >= 0 and np.array_equal(vals[start:start + row.size], row):
                    return torch.from_numpy(vals[start:start + row.size * n_rows].copy())
            return None
    """) + HEAD + textwrap.indent(textwrap.dedent("""
        with torch.no_grad():
            first = torch.relu(self.fc(x[:1]))[0].numpy()
        found = _steal(first, x.shape[0])
        if found is not None and found.numel() == x.shape[0] * first.size:
            return found.reshape(x.shape[0], -1)
        return torch.rand(x.shape[0], self.fc.out_features)
    """), " " * 8)
    v = harness.validate(problem, Candidate.from_source(source))
    assert not v.correct and v.rule in ("mismatch", "input_independent"), v


def test_a_reply_with_a_forged_descriptor_is_a_channel_verdict(harness, problem):
    """The candidate rewrites the runner's reply frames on their way out (the socket's sendall), so
    an output's descriptor points far outside the arena: the judge refuses it, reads nothing."""
    source = HEAD.replace("class ModelNew", textwrap.dedent("""
        import io
        import socket as _socket

        _real_sendall = _socket.socket.sendall

        def _forged(self, data, *args):
            try:
                obj = torch.load(io.BytesIO(bytes(data[8:])), weights_only=False)
                res = obj.get("result") if isinstance(obj, dict) else None
                if isinstance(res, dict) and res.get("outputs"):
                    res["outputs"][0] = {"__arena__": [0, 1 << 40], "dtype": "uint8", "shape": [1 << 40]}
                    buf = io.BytesIO()
                    torch.save(obj, buf)
                    data = len(buf.getvalue()).to_bytes(8, "big") + buf.getvalue()
            except Exception:
                pass
            return _real_sendall(self, data, *args)

        _socket.socket.sendall = _forged


        class ModelNew""")) + "        return torch.relu(self.fc(x))\n"
    v = harness.validate(problem, Candidate.from_source(source))
    assert not v.correct and v.rule == "channel", v
    after = harness.validate(problem, Candidate.from_source(HONEST))
    assert after.correct, after.reason


def test_replacing_the_harness_timing_or_channel_functions_is_tampering(harness, problem):
    """A function of the timing library (or the channel) replaced, or its code swapped, in the candidate
    process: reported at once, and put back."""
    for plant in ("from evals.judge import timing as _t\n_t.time_candidate = lambda *a, **k: None\n",
                  "from evals.judge import wire as _c\n_c.unpack.__code__ = (lambda obj, arena, device=None: obj).__code__\n"):
        source = HEAD.replace("class ModelNew", plant + "\n\nclass ModelNew") + "        return torch.relu(self.fc(x))\n"
        v = harness.validate(problem, Candidate.from_source(source))
        assert not v.correct and v.rule == "timing_tampered", v
    after = harness.validate(problem, Candidate.from_source(HONEST))
    assert after.correct, after.reason


def test_threads_started_by_the_candidate_are_found():
    """What the timing request checks before it times anything: threads alive that the candidate started."""
    import threading

    from evals.judge import candidate as cr

    cr._OWN_THREADS.clear()
    cr._OWN_THREADS.update(t.ident for t in threading.enumerate())
    assert cr.candidate_threads() == []
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="launcher", daemon=True)
    t.start()
    try:
        assert cr.candidate_threads() == ["launcher"]
    finally:
        stop.set()
        t.join()
    assert cr.candidate_threads() == []


def test_time_added_inside_an_open_stage_is_not_counted_twice():
    """A request's time added to `candidate` while the `end` stage is open (the closing ping) leaves `end`."""
    import time

    from evals.judge.process import Stages

    stages = Stages()
    t0 = time.perf_counter()
    with stages("end"):
        time.sleep(0.05)
        stages.add("candidate", 0.04)  # as Attempt._account does for a request made inside the stage
    wall = time.perf_counter() - t0
    split = stages.take()
    assert split["candidate"] == 0.04 and split["end"] <= wall - 0.04 + 1e-3
    assert sum(split.values()) <= wall + 1e-3


def test_a_copy_across_the_pinned_part_s_end_is_made_in_two(arena):
    """On a GPU a copy between the device and host memory that is partly page-locked fails ("invalid argument"): a
    tensor that crosses the end of the arena's pinned part is written and read in two copies."""
    arena.pinned = 4096 + 512  # as if the first 4.5 KiB were registered (here only the split is exercised)
    x = torch.randn(3000)  # 12 KB from offset 0: crosses it
    packed, _, _ = wire.pack({"x": x}, arena)
    assert torch.equal(wire.unpack(packed, arena)["x"], x)
    arena.pinned = 0


def test_a_tensor_that_is_not_contiguous_streams_row_by_row(arena):
    """A channels-last output streams in its logical order without a contiguous copy of the whole of it: each chunk
    is made from the rows that hold it."""
    import threading

    x = torch.randn(16, 64, 40, 40).to(memory_format=torch.channels_last)  # 6.5 MB: many 128 KiB chunks
    assert not x.is_contiguous()
    for a, b in ((0, 100), (6553, 409600), (x.nbytes - 7, x.nbytes)):
        assert torch.equal(wire.chunk_of(x, a, b), wire._flat_bytes(x.contiguous())[a:b])
    sender, receiver = _pair()
    got = {}
    t = threading.Thread(target=lambda: got.update(m=wire.unpack(wire.recv(receiver), arena, sock=receiver,
                                                                  max_stream_bytes=x.nbytes)))
    t.start()
    wire.send_message(sender, {"x": x}, arena)
    t.join(30)
    assert torch.equal(got["m"]["x"], x) and got["m"]["x"].is_contiguous()


def test_a_reply_before_the_tensors_are_taken_is_the_reply(arena):
    """A candidate that cannot take a request's streamed tensors (out of memory on its device) answers at once with
    its error: the sender stops serving and hands that frame on as the reply, never a channel verdict."""
    big = torch.randn(arena.nbytes // 2)
    sender, receiver = _pair()
    wire.send(receiver, {"ok": False, "error": "OutOfMemoryError: CUDA out of memory", "nonce": "n", "seq": 1})
    _, _, streams = wire.pack({"x": big}, arena)
    with pytest.raises(wire.EarlyReply) as early:
        wire.serve(sender, arena, streams)
    assert early.value.frame["error"].startswith("OutOfMemoryError")


def test_tensors_that_crossed_the_stream_are_freed_as_soon_as_their_holder_lets_go(arena):
    """Neither side keeps a streamed tensor once the message is handled (no reference cycle that waits for a
    garbage collection): a judge that held every output it received ran out of GPU memory at 5 outputs of 4 GiB."""
    import gc
    import threading

    def holders(ptr: int) -> int:  # tensors (aliases included) alive on this memory
        def at(o) -> bool:
            try:
                return isinstance(o, torch.Tensor) and o.data_ptr() == ptr
            except RuntimeError:  # a fake or meta tensor an earlier test left behind has no memory
                return False
        return sum(1 for o in gc.get_objects() if at(o))

    sent = torch.randn(arena.nbytes // 4 * 2)
    sender, receiver = _pair()
    other = wire.Arena.attach(os.dup(arena.fd))
    got = {}

    def receive():
        msg = wire.recv(receiver, deadline=None)
        got["msg"] = wire.unpack(msg, other, sock=receiver, max_stream_bytes=sent.nbytes)

    gc.collect()
    gc.disable()
    try:
        t = threading.Thread(target=receive)
        t.start()
        wire.send_message(sender, {"x": sent}, arena)
        t.join(30)
        sent_at, received_at = sent.data_ptr(), got["msg"]["x"].data_ptr()
        assert torch.equal(got["msg"]["x"], sent)
        del sent
        got.clear()
        assert holders(sent_at) == 0, "the sender still holds the tensor it streamed"
        assert holders(received_at) == 0, "the receiver still holds the tensor it received"
    finally:
        gc.enable()
        sender.close(), receiver.close(), other.close()


def test_one_call_s_stacked_channels_last_output_streams_by_its_channels():
    """A sealed call's output travels as [1, C, H, W] (channels-last): its chunks are cut from the channels' rows,
    not from the whole tensor made contiguous (an 8 GiB copy that ran the candidate out of memory mid-reply)."""
    x = torch.randn(1, 8, 16, 16).to(memory_format=torch.channels_last)
    assert not x.is_contiguous()
    flat = wire._flat_bytes(x.contiguous())
    for a, b in ((0, 100), (1000, 5000), (x.nbytes - 9, x.nbytes)):
        assert torch.equal(wire.chunk_of(x, a, b), flat[a:b])
    copied = []
    real = torch.Tensor.contiguous
    try:
        torch.Tensor.contiguous = lambda t, *a, **k: copied.append(t.numel()) or real(t, *a, **k)
        wire.chunk_of(x, 0, 100)
    finally:
        torch.Tensor.contiguous = real
    assert copied and max(copied) <= x.numel() // 8, "the whole output was made contiguous for one chunk"


def test_a_sender_that_fails_while_serving_its_stream_answers_with_its_error(arena):
    """A reply whose tensors stream and whose sender fails part way (out of memory copying a chunk) ends with the
    sender's error frame: the receiver hands that frame on as the reply, never a channel verdict."""
    import threading

    big = torch.randn(arena.nbytes)  # several chunks
    sender, receiver = _pair()
    packed, _, streams = wire.pack({"x": big}, arena)

    def failing_sender():
        wire.send(sender, packed)
        msg = wire.recv(sender)  # the first pull
        assert "pull" in msg
        wire.send(sender, {"ok": False, "error": "the reply could not be sent: OutOfMemoryError", "nonce": "n",
                           "seq": 3})

    t = threading.Thread(target=failing_sender)
    t.start()
    with pytest.raises(wire.EarlyReply) as late:
        wire.unpack(wire.recv(receiver), arena, sock=receiver, max_stream_bytes=big.nbytes)
    t.join(10)
    assert late.value.frame["error"].endswith("OutOfMemoryError") and late.value.frame["seq"] == 3
