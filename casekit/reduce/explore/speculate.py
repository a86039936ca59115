"""The reducer's side of the explorers: `--jobs` candidates at once from a library that asks one at a time.

pysource-minimize decides its next candidate from the answer to the last one.
The chain below keeps up to `jobs` explorers: the first waits for its answer;
each next one is a fork of the one before it that assumed "not kept" and has
already asked its own next question. The whole chain's questions are judged as
one batch (one probe request, runs side by side). Then, from the head: a "not
kept" answer proves the next explorer's assumption, so the head is dropped and
the next one takes its place; a "kept" answer drops every explorer after the
head (they assumed wrongly) and the head goes on. The order of answers is the
one a single explorer would have seen: the result does not depend on `jobs`
(the explorer runs with a fixed hash seed, so no pass's set order differs from
one reduction to the next either).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from casekit.reduce.explore.wire import ChannelClosed, receive, send
from casekit.reduce.source.candidate import Candidate

JudgeBatch = Callable[[Sequence[Candidate]], list[bool]]


@dataclass
class _Explorer:
    sock: socket.socket
    asked: Candidate | None = None
    answer: bool | None = None
    done: bool = False
    phase: str = ""  # the pass the explorer is in (it says when it starts one)

    def listen(self) -> None:
        """Wait for the explorer's next question (or its end)."""
        while True:
            try:
                message, _ = receive(self.sock)
            except (ChannelClosed, OSError):
                self.done, self.asked = True, None  # an explorer that died ends its line of search
                return
            kind, payload = message
            if kind == "phase":
                self.phase = str(payload)
                continue
            if kind == "ask":
                self.asked, self.answer = payload, None
            else:
                self.done, self.asked = True, None
            return

    def tell(self, *message: Any) -> None:
        try:
            send(self.sock, message)
        except OSError:
            pass

    def drop(self) -> None:
        self.tell("exit")
        self.sock.close()


@dataclass
class SearchStats:
    questions: int = 0  # candidates the explorers asked about (each judged, or answered from the cache)
    speculated: int = 0  # of them, asked by a copy that assumed an answer
    wasted: int = 0  # speculative questions whose assumption proved wrong


@dataclass
class SpeculativeSearch:
    """Runs one explorer process (and its forks) over a start; `judge` answers batches of candidates."""

    start: dict[str, Any]
    judge: JudgeBatch
    jobs: int = 1
    on_kept: Callable[[Candidate], None] = lambda candidate: None
    on_phase: Callable[[str], None] = lambda phase: None
    should_stop: Callable[[], bool] = lambda: False
    # time is up for reducing: every question of a step not in `finishing` is refused without a run, and
    # the explorer told to go on to the steps that finish the result (the tidy stage)
    cut_short: Callable[[], bool] = lambda: False
    finishing: frozenset[str] = frozenset()
    # past `should_stop`, only these steps are still judged (the last one, which writes the result out)
    last: frozenset[str] = frozenset()
    stats: SearchStats = field(default_factory=SearchStats)

    def run(self) -> bool:
        """Search until the explorer is done (True) or `should_stop` says so (False; with `last`, the search
        goes on to the last steps, every other question refused unrun)."""
        ours, theirs = socket.socketpair()
        process = subprocess.Popen(
            [sys.executable, "-m", "casekit.reduce.explore.explorer", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        theirs.close()
        chain = [_Explorer(ours)]
        said = ""
        try:
            send(ours, self.start)
            chain[0].listen()
            while not chain[0].done:
                if chain[0].phase != said:
                    said = chain[0].phase
                    self.on_phase(said)
                stopping = self.should_stop()
                if stopping and not self.last:
                    return False
                if chain[0].phase not in self.last and (
                    stopping or chain[0].phase not in self.finishing and self.cut_short()
                ):
                    self._skip(chain)
                    continue
                self._extend(chain)
                pending = [e for e in chain if e.asked is not None and e.answer is None]
                for explorer, answer in zip(pending, self.judge([e.asked for e in pending]), strict=True):  # type: ignore[misc]
                    explorer.answer = answer
                self.stats.questions += len(pending)
                self.stats.speculated += sum(1 for e in pending if e is not chain[0])
                self._resolve(chain)
            return True
        finally:
            for explorer in chain:
                explorer.drop()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _skip(self, chain: list[_Explorer]) -> None:
        """Refuse the head's question without a run and tell it to skip to the finishing steps."""
        for copy in chain[1:]:
            copy.drop()
        del chain[1:]
        head = chain[0]
        head.tell("answer", False, True)
        head.listen()

    def _extend(self, chain: list[_Explorer]) -> None:
        """Fork the last explorer until `jobs` questions are out (or a copy finishes its search)."""
        while len(chain) < self.jobs and chain[-1].asked is not None and not chain[-1].done:
            last = chain[-1]
            last.tell("fork")
            try:
                message, fd = receive(last.sock)
            except (ChannelClosed, OSError):
                return
            if message[0] != "forked" or fd is None:
                return
            copy = _Explorer(socket.socket(fileno=fd), phase=last.phase)
            copy.listen()
            chain.append(copy)
            if copy.done:
                return

    def _resolve(self, chain: list[_Explorer]) -> None:
        while chain and not chain[0].done:
            head = chain[0]
            if head.answer is None:
                return
            if head.answer:
                assert head.asked is not None
                self.on_kept(head.asked)
                for wrong in chain[1:]:
                    self.stats.wasted += 1 if wrong.asked is not None else 0
                    wrong.drop()
                del chain[1:]
                head.tell("answer", True)
                head.listen()
                return
            if len(chain) > 1:  # the next explorer assumed "not kept": it is the search now
                head.drop()
                chain.pop(0)
                continue
            head.tell("answer", False)
            head.listen()
            return
