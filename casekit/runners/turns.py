"""Turns: how perf runs on two or more warm sessions take their timed blocks one after another, A B A B …, in
the same time window (casekit.perf.measure conducts them; the probe takes them: casekit.probe, Turns).

A run given turns gets two FIFOs, made by its session in the request's own folder (casekit's, read-only in
the sandbox and hidden from every run): `go`, which casekit writes a byte to when the run may go on, and
`done`, which the run writes a byte to when it is ready (forked, at its first line) and at the end of each
turn. The probe opens both before it forks the run (and says so with a byte on `done`); the run holds only
the two descriptors, never a path. Casekit reads `done` only, so once the run and everything it started have
ended, casekit reads the end of the file: a run that dies is seen at once, even while another run of the
same request still waits for its turns.

What a run can do with them: write bytes to `done` (casekit takes any byte as a turn's end and reads at
most TURN_READ bytes at a time), read the bytes meant for it, close them, or never end a turn (casekit
waits at most its limit, then gives that run no more turns). Each spoils only its own script's timings,
which a script can always spoil; casekit follows nothing, reads nothing without bound, and never waits
past its limits.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

from casekit.fsutil import FreshTree

TURN_READ = 64  # bytes read from `done` at a time: any of them ends the turn
POLL_S = 0.05  # how often a wait looks whether the run's request has ended


class Turns:
    """casekit's ends of one run's two FIFOs (see the module's docstring); made when its request is laid out."""

    def __init__(self) -> None:
        self.go = -1
        self.done = -1
        self.paths: dict[str, str] = {}
        self.opened = False  # the probe said it opened `done`: an end of file from now on is the run's end
        self._lock = threading.Lock()  # made in the session's thread, conducted and closed in the caller's
        self._closed = False

    @property
    def made(self) -> bool:
        """Both FIFOs are made (the conductor may wait on them)."""
        with self._lock:
            return self.go >= 0 and self.done >= 0

    def make(self, tree: FreshTree, relative: str, inside: str) -> None:
        """The FIFOs `relative`.go and `relative`.done in the request's `tree`, which the run's probe sees at
        `inside`.go and `inside`.done; made after `close`, they are closed at once (the run goes untimed)."""
        go = tree.fifo(f"{relative}.go")
        try:
            done = tree.fifo(f"{relative}.done", os.O_RDONLY)
        except BaseException:
            os.close(go)
            raise
        with self._lock:
            if self._closed:
                os.close(go)
                os.close(done)
            else:
                self.go, self.done = go, done
            self.paths = {"go": f"{inside}.go", "done": f"{inside}.done"}

    def give(self) -> bool:
        """Let the run go on (one byte on `go`); False when it cannot be told (gone, or its FIFO full)."""
        try:
            return os.write(self.go, b"g") == 1
        except OSError:
            return False

    def wait(self, limit: float, running: Callable[[], bool]) -> str:
        """Until the run says its turn ended ("ended"), it ends or its request does ("gone"), or `limit`
        seconds pass ("overran"). The probe's byte (`o`, it opened the FIFO) ends no turn."""
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "overran"
            readable, _, _ = select.select([self.done], [], [], min(POLL_S, left))
            got = None
            if readable:
                try:
                    got = os.read(self.done, TURN_READ)
                except BlockingIOError:
                    pass  # woken with nothing to read
            if got:
                self.opened = True
                if got.strip(b"o"):
                    return "ended"
            elif got == b"" and self.opened:
                return "gone"  # every writer closed: the run and what it started have ended
            elif not running():
                return "gone"
            elif got == b"":
                time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))  # not opened yet: no writer

    def close(self) -> None:
        """Give no more turns: a run still waiting on `go` then reads its end and goes on untimed."""
        with self._lock:
            self._closed = True
            for fd in (self.go, self.done):
                if fd >= 0:
                    os.close(fd)
            self.go = self.done = -1
