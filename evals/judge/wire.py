"""The judge <-> candidate channel: length-prefixed frames on a dedicated socket, tensors in shared memory.

A frame is 8 bytes of big-endian length, then a ``torch.save`` payload. Tensors do not travel in
frames: each side writes them into the channel's arena (``Arena``: a memfd both processes map, sealed
against shrinking, so the candidate cannot make the judge's next access fault) and the frame carries
a descriptor (offset, dtype, shape). The judge writes a request's tensors from the arena's start and
names where the reply's may begin; the arena holds nothing but the inputs the candidate is being sent
and what it sends back, so its mapping shows the candidate nothing else. A tensor that does not fit
travels in the frame as before. The judge reads replies
with ``torch.load(weights_only=True)``: only tensors, numbers, strings and plain containers come
through (no pickled code runs in the judge). Every request carries a fresh nonce and a sequence
number; a reply is accepted only when it echoes both, and a reply followed by further bytes (a
second, forged reply) is refused. The candidate's stdout and stderr go to a log file and are never
read as replies.
"""

from __future__ import annotations

import fcntl
import io
import math
import mmap
import os
import select
import socket
import struct
import time

HEADER = struct.Struct(">Q")
MAX_FRAME_BYTES = 8 * 1024**3  # a frame larger than this is not a reply


class EarlyReply(Exception):
    """The peer answered while a request's tensors were being pulled (it failed to take them: out of memory, its
    own error): the frame is its reply to the request, read as such."""

    def __init__(self, frame):
        super().__init__("a reply before the request's tensors were taken")
        self.frame = frame


class ChannelError(Exception):
    """The peer broke the protocol (``rule`` says how it is judged: ``channel``, ``crash`` or ``timeout``)."""

    def __init__(self, rule: str, text: str):
        super().__init__(text)
        self.rule = rule
        self.text = text


def encode(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    return HEADER.pack(len(data)) + data


def decode(data: bytes, trusted: bool = False):
    """A payload as objects. ``trusted=False`` (the judge reading a candidate) admits tensors and
    plain values only."""
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu" if not trusted else None)


def send(sock: socket.socket, obj) -> None:
    sock.sendall(encode(obj))


def _read_exact(sock: socket.socket, n: int, deadline: float | None, alive=None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelError("timeout", "no answer within the watchdog")
            ready, _, _ = select.select([sock], [], [], min(remaining, 0.5))
            if not ready:
                if alive is not None and not alive():
                    raise ChannelError("crash", "the candidate process died")
                continue
        try:
            chunk = sock.recv(min(n - got, 1 << 22))
        except OSError:  # ConnectionResetError: the peer died with our request unread
            chunk = b""
        if not chunk:
            raise ChannelError("crash", "the candidate process closed the channel (it died or exited)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, deadline: float | None = None, alive=None, trusted: bool = False):
    head = _read_exact(sock, HEADER.size, deadline, alive)
    (length,) = HEADER.unpack(head)
    if length > MAX_FRAME_BYTES:
        raise ChannelError("channel", f"a frame of {length} bytes on the channel: not a reply of the harness")
    data = _read_exact(sock, length, deadline, alive)
    try:
        return decode(data, trusted=trusted)
    except Exception as exc:  # pickle.UnpicklingError, RuntimeError from weights_only
        raise ChannelError("channel", f"an unreadable frame on the channel ({type(exc).__name__})") from None


def pending_bytes(sock: socket.socket) -> bool:
    """Whether more bytes wait on the socket (after a reply, none should)."""
    ready, _, _ = select.select([sock], [], [], 0)
    if not ready:
        return False
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except (BlockingIOError, OSError):
        return False


def new_nonce() -> str:
    return os.urandom(16).hex()


# ---------------------------------------------------------------------------------------------
# The arena: tensors through shared memory

ARENA_BYTES = 1 << 30  # sparse: pages exist only where a tensor was written (a memfd of one candidate process)
ALIGN = 256
DESCRIPTOR = "__arena__"
STREAM = "__stream__"  # a tensor that did not fit the arena's free part: it crosses the stream region in chunks
CHUNK_BYTES = 64 << 20  # one half of the stream region (the arena's last two chunks): one chunk in flight, one copied
_DTYPE_NAMES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
                "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64")


def _dtypes() -> dict:
    import torch

    return {name: getattr(torch, name) for name in _DTYPE_NAMES if isinstance(getattr(torch, name, None), torch.dtype)}


class Arena:
    """Shared memory for the tensors of one judge <-> candidate channel (a sealed memfd, mapped by both)."""

    def __init__(self, fd: int, nbytes: int):
        self.fd, self.nbytes = fd, nbytes
        self.mm = mmap.mmap(fd, nbytes)
        self._bytes = None
        self.pinned = 0  # bytes from the start registered with CUDA (page-locked)

    @classmethod
    def create(cls, nbytes: int = ARENA_BYTES) -> "Arena":
        fd = os.memfd_create("mucutlass-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, nbytes)
        # the candidate maps it too: it must not shrink it under the judge's mapping (SIGBUS) or grow it
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        return cls(fd, nbytes)

    @classmethod
    def attach(cls, fd: int) -> "Arena":
        return cls(fd, os.fstat(fd).st_size)

    def bytes(self):
        """The whole arena as one uint8 tensor (no copy)."""
        if self._bytes is None:
            import torch

            self._bytes = torch.frombuffer(self.mm, dtype=torch.uint8)
        return self._bytes

    def pin(self, nbytes: int) -> int:
        """Register the arena's first ``nbytes`` with CUDA (page-locked, in this process's mapping): copies
        between them and a GPU run at DMA speed instead of through the driver's staging buffer. Returns the
        bytes pinned (0 without CUDA, or where the driver refuses: copies then stay pageable)."""
        import torch

        n = min(int(nbytes), self.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if self.pinned or n <= 0 or not torch.cuda.is_available():
            return self.pinned
        err = torch.cuda.cudart().cudaHostRegister(self.bytes().data_ptr(), n, 0)
        if int(err) == 0:
            self.pinned = n
        return self.pinned

    def write(self, offset: int, src) -> None:
        """``src`` (a flat uint8 tensor, any device) into the arena at ``offset``. A copy between a GPU and host
        memory that is partly page-locked fails, so one that crosses the pinned part's end is made in two."""
        self._copy(offset, src, into_arena=True)

    def read(self, offset: int, dst) -> None:
        """The arena's bytes at ``offset`` into ``dst`` (a flat uint8 tensor, any device)."""
        self._copy(offset, dst, into_arena=False)

    def _copy(self, offset: int, other, into_arena: bool) -> None:
        n = other.numel()
        cut = self.pinned - offset if offset < self.pinned < offset + n else n
        for a, b in ((0, cut), (cut, n)):
            if b > a:
                region = self.bytes()[offset + a:offset + b]
                if into_arena:
                    region.copy_(other[a:b])
                else:
                    other[a:b].copy_(region)

    def close(self) -> None:
        if self.pinned:
            import torch

            torch.cuda.cudart().cudaHostUnregister(self.bytes().data_ptr())
            self.pinned = 0
        self._bytes = None
        try:
            self.mm.close()
        except (BufferError, ValueError):  # a tensor still views it: the map goes with the last one
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass


def chunk_bytes(arena: Arena) -> int:
    """One half of ``arena``'s stream region: ``CHUNK_BYTES``, or an eighth of a small arena."""
    return max(ALIGN, min(CHUNK_BYTES, arena.nbytes // 8) // ALIGN * ALIGN)


def inline_limit(arena: Arena | None) -> int:
    """The end of the arena's part for tensors written whole (the stream region follows it)."""
    return 0 if arena is None else arena.nbytes - 2 * chunk_bytes(arena)


def _flat_bytes(t):
    """A contiguous tensor's bytes as a flat uint8 tensor (a view)."""
    import torch

    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def chunk_of(t, a: int, b: int):
    """Bytes [a, b) of ``t`` in row-major order as a flat uint8 tensor: a view of a contiguous tensor; of another
    (a channels-last output), only the rows that hold those bytes made contiguous, never the whole tensor."""
    if t.is_contiguous():
        return _flat_bytes(t)[a:b]
    while t.dim() > 1 and t.shape[0] == 1:  # [1, C, H, W] (one call's output stacked): its rows are C's, not all
        t = t[0]
    rows = t.shape[0] if t.dim() else 1
    row = t.numel() * t.element_size() // max(rows, 1)
    if t.dim() == 0 or row == 0:
        return _flat_bytes(t.contiguous())[a:b]
    r0, r1 = a // row, -(-b // row)
    return _flat_bytes(t[r0:r1].contiguous())[a - r0 * row:b - r0 * row]


def pack(obj, arena: Arena | None, start: int = 0) -> tuple[object, int, list]:
    """``obj`` with every tensor replaced by a descriptor: written whole into ``arena`` from ``start`` while it
    fits before the stream region, else named as a stream (it crosses the stream region in chunks once the
    frame is sent: ``serve``). Returns the packed object, the first free offset and the streamed tensors (each
    contiguous, on its own device). Without an arena a tensor travels in the frame (on the CPU)."""
    import torch

    limit = inline_limit(arena)
    at = [max(0, min(int(start), limit))]
    streams: list = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            t = x.detach()
            if arena is None or t.dtype not in names or t.is_sparse or t.layout is not torch.strided:
                return t.to("cpu") if t.device.type != "cpu" else t
            nbytes = t.numel() * t.element_size()
            off = -(-at[0] // ALIGN) * ALIGN
            meta = {"dtype": names[t.dtype], "shape": list(t.shape)}
            if off + nbytes > limit:
                streams.append(t)  # as it is: its chunks are made as they are pulled (serve)
                return {STREAM: [len(streams) - 1, nbytes], **meta}
            if nbytes:
                arena.write(off, _flat_bytes(t.contiguous()))
            at[0] = off + nbytes
            return {DESCRIPTOR: [off, nbytes], **meta}
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    names = {v: k for k, v in _dtypes().items()}
    try:
        out = walk(obj)
    finally:
        # `walk` refers to itself through its closure: a cycle that would hold `streams` (whole tensors) until a
        # garbage collection; emptying its cell breaks it now
        del walk
    return out, -(-at[0] // ALIGN) * ALIGN, streams


def send_message(sock: socket.socket, obj, arena: Arena | None, start: int = 0, deadline: float | None = None,
                 alive=None) -> int:
    """Send ``obj`` (its tensors through ``arena``) and serve the receiver's pulls of the streamed ones; returns
    the first free offset of the arena's inline part."""
    packed, end, streams = pack(obj, arena, start)
    send(sock, packed)
    if streams:
        serve(sock, arena, streams, deadline, alive)
    return end


def serve(sock: socket.socket, arena: Arena, streams: list, deadline: float | None = None, alive=None) -> None:
    """The sender's half of streaming: for every ``{"pull": [i, j]}`` write chunk ``j`` of stream ``i`` into the
    stream region's half for that chunk and answer where it is, until ``{"done": true}``. Chunks alternate
    between the halves in the order they are pulled, so the one pulled next never overwrites one being copied."""
    chunk = chunk_bytes(arena)
    base = inline_limit(arena)
    sizes = [t.numel() * t.element_size() for t in streams]
    served = 0
    while True:
        msg = recv(sock, deadline, alive)
        if isinstance(msg, dict) and msg.get("done") is True:
            return
        if isinstance(msg, dict) and "nonce" in msg and "pull" not in msg:
            raise EarlyReply(msg)
        pull = msg.get("pull") if isinstance(msg, dict) else None
        if not (isinstance(pull, list) and len(pull) == 2 and all(type(v) is int for v in pull)
                and 0 <= pull[0] < len(sizes) and 0 <= pull[1] * chunk < max(sizes[pull[0]], 1)):
            raise ChannelError("channel", "a request for a chunk of a streamed tensor that was not sent")
        i, j = pull
        part = chunk_of(streams[i], j * chunk, min(sizes[i], (j + 1) * chunk))
        off = base + (served % 2) * chunk
        arena.write(off, part)
        send(sock, {"chunk": [i, j], "at": off, "nbytes": int(part.numel())})
        served += 1


def unpack(obj, arena: Arena | None, device=None, sock: socket.socket | None = None, deadline: float | None = None,
           alive=None, max_stream_bytes: int | None = None):
    """``obj`` with every descriptor replaced by a tensor copied out of ``arena`` onto ``device`` (the CPU by
    default), streamed tensors pulled through ``sock`` chunk by chunk into a tensor allocated on ``device``. A
    descriptor that is malformed or out of bounds, or streams that pass ``max_stream_bytes``, are a
    ``ChannelError``."""
    import torch

    dtypes = _dtypes()
    streamed: list = []  # (index, destination bytes)

    def bad(text: str):
        return ChannelError("channel", f"a tensor descriptor on the channel is not valid: {text}")

    def typed(d: dict):
        name, shape = d.get("dtype"), d.get("shape")
        if name not in dtypes or not isinstance(shape, list) or not all(type(v) is int and v >= 0 for v in shape):
            raise bad("dtype or shape")
        dtype = dtypes[name]
        size = dtype.itemsize if hasattr(dtype, "itemsize") else torch.empty((), dtype=dtype).element_size()
        return dtype, shape, math.prod(shape) * size

    def tensor(d: dict):
        loc = d.get(DESCRIPTOR)
        if arena is None:
            raise bad("no shared arena")
        if not (isinstance(loc, list) and len(loc) == 2 and all(type(v) is int for v in loc)):
            raise bad("location")
        off, nbytes = loc
        dtype, shape, expected = typed(d)
        if off < 0 or off % ALIGN or nbytes != expected or off + nbytes > arena.nbytes:
            raise bad(f"{nbytes} bytes at {off} for {d.get('dtype')}{shape}")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype, device=device)
        out = torch.empty(shape, dtype=dtype, device=device if device is not None else "cpu")
        arena.read(off, _flat_bytes(out))
        return out

    def stream(d: dict):
        loc = d.get(STREAM)
        if arena is None or sock is None:
            raise bad("a streamed tensor where nothing can stream")
        if not (isinstance(loc, list) and len(loc) == 2 and all(type(v) is int for v in loc)) or loc[0] != len(streamed):
            raise bad("stream index")
        dtype, shape, expected = typed(d)
        if loc[1] != expected:
            raise bad(f"{loc[1]} bytes for {d.get('dtype')}{shape}")
        total = sum(t.numel() for _, t in streamed) + expected
        if max_stream_bytes is not None and total > max_stream_bytes:
            raise ChannelError("channel", f"a reply streams {total} bytes of tensors, more than the "
                               f"{max_stream_bytes} this request can return")
        out = torch.empty(shape, dtype=dtype, device=device if device is not None else "cpu")
        streamed.append((loc[0], _flat_bytes(out)))
        return out

    def walk(x):
        if isinstance(x, dict):
            if DESCRIPTOR in x:
                return tensor(x)
            if STREAM in x:
                return stream(x)
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, torch.Tensor) and device is not None:  # one that travelled in the frame
            return x.to(device)
        return x

    try:
        out = walk(obj)
        if streamed:
            _pull(sock, arena, streamed, deadline, alive)
        return out
    finally:  # as in ``pack``: the received tensors are not held by `walk`'s cycle until a collection
        del walk


def _pull(sock: socket.socket, arena: Arena, streamed: list, deadline: float | None, alive) -> None:
    """The receiver's half of streaming: every chunk of every streamed tensor pulled in order, the next one
    asked for before the current one is copied out (the sender writes it into the other half meanwhile)."""
    chunk = chunk_bytes(arena)
    base = inline_limit(arena)
    order = [(i, j) for i, dest in streamed for j in range(-(-dest.numel() // chunk))]
    dests = dict(streamed)
    if order:
        send(sock, {"pull": list(order[0])})
    for n, (i, j) in enumerate(order):
        msg = recv(sock, deadline, alive)
        if isinstance(msg, dict) and "nonce" in msg and "chunk" not in msg:
            raise EarlyReply(msg)  # the sender failed while serving and said why: that frame is its reply
        want = dests[i][j * chunk:(j + 1) * chunk]
        at = base + (n % 2) * chunk
        if not (isinstance(msg, dict) and msg.get("chunk") == [i, j] and msg.get("at") == at
                and msg.get("nbytes") == want.numel()):
            raise ChannelError("channel", "a chunk of a streamed tensor that was not the one asked for")
        if n + 1 < len(order):
            send(sock, {"pull": list(order[n + 1])})
        arena.read(at, want)
    send(sock, {"done": True})
