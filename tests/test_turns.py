"""casekit.runners.turns on its own: the FIFOs made in a fresh tree, what casekit reads from them, and a close
that races the session's make (the conductor may end a round while a session still lays out its request)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from casekit.fsutil import FreshTree
from casekit.runners.turns import Turns


def made(tmp_path: Path) -> Turns:
    turns = Turns()
    with FreshTree(tmp_path / "request") as tree:
        turns.make(tree, "turns/job", "/casekit/in/requests/1/turns/job")
    return turns


def test_the_runs_ready_byte_ends_a_wait_the_probes_does_not_and_its_end_is_the_runs(tmp_path: Path) -> None:
    turns = made(tmp_path)
    assert turns.made and turns.paths["go"].endswith("turns/job.go")
    writer = os.open(tmp_path / "request" / "turns" / "job.done", os.O_WRONLY)
    try:
        assert turns.wait(0.2, lambda: True) == "overran"  # nothing said yet
        os.write(writer, b"o")  # the probe opened it: not a turn's end
        assert turns.wait(0.2, lambda: True) == "overran"
        os.write(writer, b"r")
        assert turns.wait(1, lambda: True) == "ended"
    finally:
        os.close(writer)
    began = time.monotonic()
    assert turns.wait(30, lambda: True) == "gone"  # every writer closed, though its request still runs
    assert time.monotonic() - began < 1
    turns.close()


def test_before_the_probe_opens_done_its_end_of_file_is_not_the_runs_end(tmp_path: Path) -> None:
    turns = made(tmp_path)
    assert turns.wait(0.3, lambda: True) == "overran"
    assert turns.wait(0.3, lambda: False) == "gone"  # its request ended
    turns.close()


def test_turns_closed_before_the_session_makes_them_are_closed_at_once(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    turns = Turns()
    turns.close()
    (tmp_path / "control").mkdir()
    control = made(tmp_path / "control")  # the same make on turns not closed holds two descriptors
    assert len(os.listdir("/proc/self/fd")) == before + 2
    control.close()
    with FreshTree(tmp_path / "request") as tree:
        turns.make(tree, "turns/job", "/in/turns/job")
    assert not turns.made and (turns.go, turns.done) == (-1, -1)
    assert len(os.listdir("/proc/self/fd")) == before
