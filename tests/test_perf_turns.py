"""Warm rounds in turns, on real sandboxed warm sessions and real Inductor: the baseline's two processes and
the target's run at once, but each compiles alone and their timed blocks alternate, never overlapping
(each block's span is taken on the host's monotonic clock, which the sandbox shares)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from casekit.model import ScriptRole
from casekit.perf.measure import PerfSubject, PerfTarget, measure_subject
from casekit.perf.settings import PerfSettings
from casekit.runners.interface import ProbeScheduling, ScriptEntry
from casekit.runners.sandbox import Sandbox
from casekit.runners.warm import WarmSession

pytestmark = [pytest.mark.slow]

SCRIPT = """\
import torch


def step(x, w):
    for _ in range(4):
        x = torch.tanh(x @ w)
    return x


compiled = torch.compile(step)
x, w = torch.randn(16, 64), torch.randn(64, 64) / 8
for _ in range(3):
    compiled(x, w)
"""


def perf_session() -> WarmSession:
    opened = WarmSession(sys.executable, ScriptEntry.PERF, Sandbox.from_options(), None, ProbeScheduling(1, 1, True))
    opened.preload = ["torch._inductor.compile_fx"]
    return opened


def test_a_rounds_processes_take_their_blocks_in_turns_and_share_their_targets_cache(tmp_path: Path) -> None:
    script = tmp_path / "step.py"
    script.write_text(SCRIPT)
    subject = PerfSubject("c", ScriptRole.PRE, script.name, SCRIPT, script)
    said: list[str] = []
    a, b = perf_session(), perf_session()
    try:
        settings = PerfSettings(cold=1, warm=2, max_warm=2, blocks=6)
        measured = measure_subject(subject, [PerfTarget("A", a), PerfTarget("B", b)], settings, said.append)
    finally:
        a.close()
        b.close()
    assert [len(measured.samples[label]) for label in ("A", "B")] == [5, 3]  # a cold each; 2 rounds of A, B, A'
    for number in range(2):
        first, second = (half[number] for half in measured.baseline_halves)
        (target,) = [s for s in measured.samples["B"] if s.round == number]
        round_ = [first, target, second]
        assert all(s.ok and s.round == number for s in round_), [s.detail for s in round_]
        assert all(len(s.blocks) == len(s.spans) == 6 for s in round_), [len(s.spans) for s in round_]
        # both of the baseline's processes ran in one request of its session: the cache the cold one left
        assert all(s.cache_hits > 0 and s.cache_misses == 0 for s in round_)
        spans = sorted((start, end, index) for index, s in enumerate(round_) for start, end in s.spans)
        for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, spans  # no block of one process overlaps another's
        # cycle by cycle, each process once, the order reversed every other cycle: A B A' | A' B A | ...
        order = [index for _, _, index in spans]
        assert order[:6] == [0, 1, 2, 2, 1, 0], order
    assert not any("outlasted" in line for line in said), said


def test_a_round_whose_run_fails_before_its_turns_does_not_wait_for_it(tmp_path: Path) -> None:
    """A target's script that raises on its first line never says its compile turn ended: the round goes on
    with the others as soon as its request ends, not after a turn's limit."""
    script = tmp_path / "step.py"
    script.write_text("import os\nif os.environ.get('FAIL_HERE'):\n    raise SystemExit(3)\n" + SCRIPT)
    subject = PerfSubject("c", ScriptRole.PRE, script.name, script.read_text(), script)
    a = perf_session()
    b = WarmSession(
        sys.executable, ScriptEntry.PERF, Sandbox.from_options(), {"FAIL_HERE": "1"}, ProbeScheduling(1, 1, True)
    )
    began = time.monotonic()
    try:
        settings = PerfSettings(cold=0, warm=1, max_warm=1, blocks=4)
        measured = measure_subject(subject, [PerfTarget("A", a), PerfTarget("B", b)], settings, lambda line: None)
    finally:
        a.close()
        b.close()
    (failed,) = measured.samples["B"]
    assert not failed.ok and "exit" in failed.detail.lower(), failed.detail
    assert all(s.ok and len(s.spans) == 4 for s in measured.samples["A"]), [s.detail for s in measured.samples["A"]]
    assert time.monotonic() - began < 150  # two imports and one cold compile here: 40-80 s; a turn's limit is 600 s
