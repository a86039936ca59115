"""Shared pieces of the attack suite: a loopback listener on the HOST that records every contact."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from casekit.runners.sandbox import locate_bwrap, unavailable_reason

SCRIPTS = Path(__file__).parent / "scripts"
# The sandbox attacks skip only where the host cannot sandbox and CI did not promise it could.
requires_sandbox = pytest.mark.skipif(
    unavailable_reason(locate_bwrap(), sys.executable) is not None and not os.environ.get("CASEKIT_REQUIRE_SANDBOX"),
    reason="this host cannot sandbox (no bwrap or no user namespaces)",
)


@dataclass
class Listener:
    """TCP and UDP on 127.0.0.1 (same port number) in the host's network namespace."""

    port: int
    contacts: list[str] = field(default_factory=list)


@pytest.fixture
def loopback_listener() -> Iterator[Listener]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    port = tcp.getsockname()[1]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", port))
    listener = Listener(port)
    stop = threading.Event()

    def accept() -> None:
        tcp.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = tcp.accept()
            except OSError:
                continue
            conn.settimeout(2)
            try:
                listener.contacts.append("tcp:" + conn.recv(200).decode(errors="replace"))
            except OSError:
                listener.contacts.append("tcp")
            conn.close()

    def receive() -> None:
        udp.settimeout(0.2)
        while not stop.is_set():
            try:
                listener.contacts.append("udp:" + udp.recv(200).decode(errors="replace"))
            except OSError:
                continue

    threads = [threading.Thread(target=accept, daemon=True), threading.Thread(target=receive, daemon=True)]
    for thread in threads:
        thread.start()
    yield listener
    stop.set()
    for thread in threads:
        thread.join(timeout=2)
    tcp.close()
    udp.close()
