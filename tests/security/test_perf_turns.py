"""Attacks on the turns of perf's warm rounds (casekit.runners.turns): a run holds two FIFO descriptors
shared with casekit, `go` and `done`. A script that floods `done`, steals the bytes meant for its own
`go`, or closes both spoils only its own timings: casekit reads bounded, waits within its limits, ends
the round, and the other runs of the round still get their turns. Each attack's control shows it was
carried out (the script found the descriptors and used them)."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from casekit.perf import measure
from casekit.runners.interface import ProbeJob, ProbeScheduling, ScriptEntry
from casekit.runners.sandbox import Sandbox
from casekit.runners.turns import Turns
from casekit.runners.warm import WarmSession

from .conftest import requires_sandbox

pytestmark = [pytest.mark.slow, requires_sandbox]

# Finds the run's turn descriptors (FIFOs, one read-only, one write-only), then does what ATTACK says, and
# prints what it did as the last line of its stderr; then an entry point perf can time.
ATTACKER = """\
import fcntl, json, os, stat, sys, threading, time
import torch

fifos = {}
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fifos["go" if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY else "done"] = fd
    except OSError:
        pass
done = {"found": sorted(fifos), "written": 0, "stolen": 0}
attack = os.environ.get("ATTACK", "")


def flood():
    os.set_blocking(fifos["done"], False)
    for _ in range(20000):
        try:
            done["written"] += os.write(fifos["done"], b"x" * 4096)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            return


def steal():
    while True:
        got = os.read(fifos["go"], 1)
        if not got:
            return
        done["stolen"] += 1
        print(json.dumps(done), file=sys.stderr, flush=True)  # its blocks come after the script's last line


if attack == "flood" and "done" in fifos:
    threading.Thread(target=flood, daemon=True).start()
if attack == "steal" and "go" in fifos:
    threading.Thread(target=steal, daemon=True).start()
if attack == "close":
    for fd in fifos.values():
        os.close(fd)


def step(x):
    return torch.tanh(x @ x)


compiled = torch.compile(step, backend="eager")
x = torch.randn(32, 32)
for _ in range(3):
    compiled(x)
time.sleep(0.5)
print(json.dumps(done), file=sys.stderr)
"""


def session(attack: str = "") -> WarmSession:
    env = {"ATTACK": attack} if attack else None
    return WarmSession(sys.executable, ScriptEntry.PERF, Sandbox.from_options(), env, ProbeScheduling(1, 1, True))


def run_attacked_round(tmp_path: Path, attack: str) -> tuple[dict, dict, float]:
    """One round in turns: an honest run and an attacker on its own session; their raw results and the
    round's seconds."""
    script = tmp_path / "attack.py"
    script.write_text(ATTACKER)
    honest, attacker = session(), session(attack)
    turns = [Turns(), Turns()]
    results: list[dict] = [{}, {}]
    try:
        for opened in (honest, attacker):
            opened.start(lambda line: None)

        def work(index: int, opened: WarmSession) -> None:
            job = ProbeJob(
                id=f"j{index}", script=script, modes=("perf",), backend="eager", timeout=120,
                perf={"cache": "warm", "cache_key": "k", "blocks": 6, "block_s": 0.01, "threads": 1},
                turns=turns[index],
            )  # fmt: skip
            results[index] = opened.run_probe([job], lambda line: None).results.get(job.id) or {}

        threads = [threading.Thread(target=work, args=pair) for pair in enumerate((honest, attacker))]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        try:
            measure.conduct(turns, threads, 6, 120, lambda line: None)
        finally:
            for opened_turns in turns:
                opened_turns.close()
            for thread in threads:
                thread.join()
        return results[0], results[1], time.monotonic() - began
    finally:
        honest.close()
        attacker.close()


def what_it_did(result: dict) -> dict:
    tail = ((result.get("runs") or {}).get("perf") or {}).get("stderr_tail") or ""
    lines = [line for line in tail.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def blocks_of(result: dict) -> int:
    steady = ((result.get("runs") or {}).get("perf") or {}).get("steady") or {}
    return len(steady.get("spans") or [])


@requires_sandbox
@pytest.mark.parametrize("attack", ["flood", "steal", "close"])
def test_a_run_that_abuses_its_turns_spoils_only_its_own_timings(tmp_path: Path, attack: str) -> None:
    honest, attacker, seconds = run_attacked_round(tmp_path, attack)
    did = what_it_did(attacker)
    # the control: the attacker found both descriptors and used them as it meant to
    assert did.get("found") == ["done", "go"], did
    if attack == "flood":
        assert did["written"] >= 64 * 1024, did  # a full pipe: far more than casekit reads at once
    if attack == "steal":
        assert did["stolen"] >= 1, did
    # the honest run got all its turns, casekit did not wait past its limits, the attacker still has a result
    assert blocks_of(honest) == 6, honest.get("runs")
    assert ((attacker.get("runs") or {}).get("perf") or {}).get("status") == "ok", attacker
    assert seconds < measure.BLOCK_TURN_S * 2 + 60, seconds
