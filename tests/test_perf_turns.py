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
        # cycle by cycle, each process once, always in the same order: A B A' | A B A' | ... (none twice in a row)
        order = [index for _, _, index in spans]
        assert order == [0, 1, 2] * 6, order
    assert not any("outlasted" in line for line in said), said


FAILS_FIRST = """\
import os
if os.environ.get("FAIL_FIRST"):  # the first run of this session's cache fails on its first line, the next goes on
    os.makedirs(os.environ["TORCHINDUCTOR_CACHE_DIR"], exist_ok=True)
    try:
        os.close(os.open(os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "marker"), os.O_CREAT | os.O_EXCL))
        raise SystemExit(3)
    except FileExistsError:
        pass
"""


def test_a_run_that_fails_is_not_waited_for_while_its_requests_other_run_waits_for_turns(tmp_path: Path) -> None:
    """The baseline's first process fails on its first line, while its second (the same request) waits for its
    turns: its end is seen at once (the end of its `done` FIFO), not after the compile turn's limit of 600 s."""
    source = FAILS_FIRST + SCRIPT
    script = tmp_path / "step.py"
    script.write_text(source)
    subject = PerfSubject("c", ScriptRole.PRE, script.name, source, script)
    a = WarmSession(
        sys.executable, ScriptEntry.PERF, Sandbox.from_options(), {"FAIL_FIRST": "1"}, ProbeScheduling(1, 1, True)
    )
    b = perf_session()
    began = time.monotonic()
    try:
        settings = PerfSettings(cold=0, warm=1, max_warm=1, blocks=4)
        measured = measure_subject(subject, [PerfTarget("A", a), PerfTarget("B", b)], settings, lambda line: None)
    finally:
        a.close()
        b.close()
    (failed,), (second,) = measured.baseline_halves
    assert not failed.ok and "exit" in failed.detail.lower(), failed.detail
    assert second.ok and len(second.spans) == 4, second.detail
    assert all(s.ok and len(s.spans) == 4 for s in measured.samples["B"]), [s.detail for s in measured.samples["B"]]
    assert time.monotonic() - began < 200  # two imports and two cold compiles here: 60-100 s
