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

ARENA_BYTES = 4 << 30  # sparse: pages exist only where a tensor was written (a memfd of one candidate process)
ALIGN = 256
DESCRIPTOR = "__arena__"
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


def pack(obj, arena: Arena | None, start: int = 0) -> tuple[object, int]:
    """``obj`` with every tensor written into ``arena`` from ``start`` and replaced by a descriptor;
    returns it and the first free offset. Without an arena, or for a tensor that does not fit, the
    tensor stays in the frame (on the CPU)."""
    import torch

    at = [max(0, min(int(start), arena.nbytes if arena else 0))]

    def walk(x):
        if isinstance(x, torch.Tensor):
            t = x.detach()
            nbytes = t.numel() * t.element_size()
            off = -(-at[0] // ALIGN) * ALIGN
            if arena is None or t.dtype not in names or off + nbytes > arena.nbytes or t.is_sparse \
                    or t.layout is not torch.strided:
                return t.to("cpu") if t.device.type != "cpu" else t
            if nbytes:
                arena.bytes()[off:off + nbytes].view(t.dtype).view(t.shape).copy_(t)
            at[0] = off + nbytes
            return {DESCRIPTOR: [off, nbytes], "dtype": names[t.dtype], "shape": list(t.shape)}
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    names = {v: k for k, v in _dtypes().items()}
    out = walk(obj)
    return out, -(-at[0] // ALIGN) * ALIGN


def unpack(obj, arena: Arena | None, device=None):
    """``obj`` with every descriptor replaced by a tensor copied out of ``arena`` onto ``device`` (the
    CPU by default). A descriptor that is malformed or out of bounds is a ``ChannelError``."""
    import torch

    dtypes = _dtypes()

    def bad(text: str):
        return ChannelError("channel", f"a tensor descriptor on the channel is not valid: {text}")

    def tensor(d: dict):
        loc, name, shape = d.get(DESCRIPTOR), d.get("dtype"), d.get("shape")
        if arena is None:
            raise bad("no shared arena")
        if not (isinstance(loc, list) and len(loc) == 2 and all(type(v) is int for v in loc)):
            raise bad("location")
        off, nbytes = loc
        if name not in dtypes or not isinstance(shape, list) or not all(type(v) is int and v >= 0 for v in shape):
            raise bad("dtype or shape")
        dtype = dtypes[name]
        size = dtype.itemsize if hasattr(dtype, "itemsize") else torch.empty((), dtype=dtype).element_size()
        if off < 0 or off % ALIGN or nbytes != math.prod(shape) * size or off + nbytes > arena.nbytes:
            raise bad(f"{nbytes} bytes at {off} for {name}{shape}")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype, device=device)
        view = arena.bytes()[off:off + nbytes].view(dtype).view(shape)
        return view.to(device if device is not None else "cpu", copy=True)

    def walk(x):
        if isinstance(x, dict):
            return tensor(x) if DESCRIPTOR in x else {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, torch.Tensor) and device is not None:  # one that travelled in the frame
            return x.to(device)
        return x

    return walk(obj)
