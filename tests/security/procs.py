"""Finding processes on the HOST by a marker: sandboxed processes have pids of their own namespace,
so tests tag them (an environment variable or an argument) and look them up in the host's /proc."""

from __future__ import annotations

import os
import time
from pathlib import Path

from casekit.runners.process import live_processes


def marked_processes(token: str) -> list[int]:
    """Live (not zombie) host processes whose command line or environment holds `token`."""
    found = []
    needle = token.encode()
    for pid in live_processes():  # casekit's own walk of /proc: the one kill_process_tree uses
        if pid == os.getpid():
            continue
        entry = Path(f"/proc/{pid}")
        try:
            if needle in (entry / "cmdline").read_bytes() or needle in (entry / "environ").read_bytes():
                found.append(pid)
        except OSError:
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
