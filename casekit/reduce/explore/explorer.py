"""An explorer: the pipeline's passes running in a process of their own, asking the reducer about each
candidate.

`python -m casekit.reduce.explore.explorer FD` reads its start on the socket FD (the facts, the trees to
start from, the names of the pipeline's steps to run), then runs those steps of `PIPELINE` in their
order. Each pass asks about one candidate and waits for the answer, deciding what to try next from
it, so none can batch; the reducer gets `--jobs` candidates at once by telling a waiting explorer to
fork: the copy assumes "not kept" and goes on to the next question (speculation, `speculate.py`). If
the answer was "not kept", the copy was right and the original explorer is dropped; if "kept", the
copies are dropped.

No candidate runs here: candidates are only built, rendered and compiled (never executed).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import Any

from casekit.reduce.explore.search import TreeSearch
from casekit.reduce.explore.wire import ChannelClosed, receive, send
from casekit.reduce.passes.base import Skipped
from casekit.reduce.passes.minimize import use_fast_copy
from casekit.reduce.pipeline import run_pipeline
from casekit.reduce.source.candidate import Candidate


class Explorer:
    """One line of the search: the channel to the reducer, which answers each question."""

    def __init__(self, sock: socket.socket, start: dict[str, Any]) -> None:
        self.sock = sock
        self.search = TreeSearch(start["facts"], start["trees"], self.judge, self.say)
        self.steps: tuple[str, ...] = tuple(start["steps"])

    def run(self) -> None:
        run_pipeline(self.search, self.steps)
        send(self.sock, ("done", None))
        while True:  # the reducer answers "exit" (or closes the channel)
            self.wait_for_answer()

    def say(self, phase: str) -> None:
        send(self.sock, ("phase", phase))

    def judge(self, candidate: Candidate) -> bool:
        send(self.sock, ("ask", candidate))
        return self.wait_for_answer()

    def wait_for_answer(self) -> bool:
        while True:
            try:
                message, _ = receive(self.sock)
            except (ChannelClosed, OSError):
                os._exit(0)
            kind = message[0]
            if kind == "answer":
                if len(message) > 2 and message[2]:
                    raise Skipped  # time is up for reducing: on to the steps that finish the result
                return bool(message[1])
            if kind == "fork" and self.fork():
                return False  # the copy: it goes on as if the answer were "not kept"
            if kind == "exit":
                os._exit(0)

    def fork(self) -> bool:
        """Fork a copy that goes on speculating; True in the copy. The reducer gets the copy's channel."""
        ours, theirs = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.sock.close()
            ours.close()
            self.sock = theirs
            return True
        theirs.close()
        send(self.sock, ("forked", pid), fd=ours.fileno())
        ours.close()
        return False


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the reducer's: it ends every explorer
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked copies need no reaping
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))  # deep trees: the library recurses
    use_fast_copy()
    sock = socket.socket(fileno=int(argv[1]))
    try:
        start, _ = receive(sock)
    except ChannelClosed:
        return 0
    Explorer(sock, start).run()
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv))
