"""The judge <-> candidate channel: length-prefixed frames on a dedicated socket.

A frame is 8 bytes of big-endian length, then a ``torch.save`` payload. The judge reads replies
with ``torch.load(weights_only=True)``: only tensors, numbers, strings and plain containers come
through (no pickled code runs in the judge). Every request carries a fresh nonce and a sequence
number; a reply is accepted only when it echoes both, and a reply followed by further bytes (a
second, forged reply) is refused. The candidate's stdout and stderr go to a log file and are never
read as replies.
"""

from __future__ import annotations

import io
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
