"""Messages between the reducer and its explorer processes: length-prefixed pickles on a unix socket.

Both ends are casekit's own processes on the host (no candidate code runs in
either), so pickle carries the trees; a file descriptor rides on a message when
an explorer forks (the new explorer's end of its own socket).
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

HEADER = struct.Struct(">I")


class ChannelClosed(EOFError):
    """The other end is gone."""


def send(sock: socket.socket, message: Any, fd: int | None = None) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = HEADER.pack(len(payload)) + payload
    if fd is None:
        sock.sendall(data)
        return
    sent = socket.send_fds(sock, [data], [fd])  # the descriptor travels with the first bytes
    if sent < len(data):
        sock.sendall(data[sent:])


def receive(sock: socket.socket) -> tuple[Any, int | None]:
    """One message and the descriptor that came with it (None when none did)."""
    header, fds, _, _ = socket.recv_fds(sock, HEADER.size, 1)
    if not header:
        raise ChannelClosed
    while len(header) < HEADER.size:
        more = sock.recv(HEADER.size - len(header))
        if not more:
            raise ChannelClosed
        header += more
    (size,) = HEADER.unpack(header)
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ChannelClosed
        chunks.append(chunk)
        left -= len(chunk)
    return pickle.loads(b"".join(chunks)), (fds[0] if fds else None)
