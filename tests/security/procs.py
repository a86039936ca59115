"""Finding processes on the HOST by a marker: sandboxed processes have pids of their own namespace,
so tests tag them (an environment variable or an argument) and look them up in the host's /proc."""

from __future__ import annotations

import os
import time
from pathlib import Path


def marked_processes(token: str) -> list[int]:
    """Live (not zombie) host processes whose command line or environment holds `token`."""
    found = []
    needle = token.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if needle in (entry / "cmdline").read_bytes() or needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def wait_unmarked(token: str, within: float = 10.0) -> list[int]:
    """The marked processes still alive after `within` seconds (empty: all gone)."""
    deadline = time.monotonic() + within
    while True:
        left = marked_processes(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def wait_marked(token: str, within: float = 120.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = marked_processes(token)
        if found:
            return found
        time.sleep(0.1)
    return []
