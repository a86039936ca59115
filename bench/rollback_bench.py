"""Rollback verification in the replay's warm probe vs a second probe, side by side in one run (`make bench`).

Two archives, each replayed on this interpreter (python runner), alternating
the two ways for --repeats rounds, median wall time each:

- broken fix: the starter archive's tensor-if with its post-fix made the
  repro (its break is back), so the replay verifies a rollback;
- starter: the 9 starter cases as they are (no rollback needed): what the warm
  path costs when there is nothing to verify.

"warm" is casekit's way (one probe serves the batch, then the verification:
one torch import); "second probe" is the runner's own probe per batch (the
way before: a second import for the verification). The torch imports each
way made are counted from its progress lines. Both must give the same
verdicts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from casekit.archive.store import Archive
from casekit.bundle import sha256_text
from casekit.replay import run as replay_run
from casekit.runners.interface import BatchSession, TargetSpec
from casekit.runners.python import PythonRunner
from casekit.runners.registry import make_runner

CASES = Path(__file__).resolve().parent.parent / "cases"


def archives() -> dict[str, list]:
    folder = Path(tempfile.mkdtemp(prefix="rollback-bench-"))
    for bundle in CASES.glob("*.toml"):
        shutil.copy(bundle, folder / bundle.name)
    starter = Archive(folder).load_all()
    [case] = [c for c in starter if c.id == "tensor-if"]
    assert case.post is not None
    broken = replace(case, post=replace(case.post, source=case.pre.source, sha256=sha256_text(case.pre.source)))
    return {"broken fix": [broken], "starter": starter}


def once(cases: list, warm: bool) -> tuple[float, int, list[str]]:
    real = PythonRunner.open_session
    if not warm:  # the runner's own probe per batch: a session that keeps nothing warm
        PythonRunner.open_session = lambda self, entry, **options: BatchSession(self, entry)  # type: ignore[method-assign]
    said: list[str] = []
    started = time.monotonic()
    try:
        report = replay_run.replay(
            cases, [TargetSpec(runner="python")], replay_run.ReplayOptions(record=False), None, make_runner, said.append
        )
    finally:
        PythonRunner.open_session = real  # type: ignore[method-assign]
    verdicts = sorted(
        f"{r.case_id}:{r.verdict.value}:{r.rollback.verified if r.rollback else '-'}" for r in report.results
    )
    return time.monotonic() - started, sum(1 for m in said if "importing torch" in m), verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    status = 0
    for name, cases in archives().items():
        times: dict[bool, list[float]] = {True: [], False: []}
        imports: dict[bool, int] = {}
        verdicts: dict[bool, list[str]] = {}
        for _ in range(args.repeats):
            for warm in (False, True):
                seconds, imported, verdicts[warm] = once(cases, warm)
                times[warm].append(seconds)
                imports[warm] = imported
        if verdicts[True] != verdicts[False]:
            print(f"{name}: the two ways disagree: {verdicts[True]} vs {verdicts[False]}")
            status = 1
        warm_s, second_s = statistics.median(times[True]), statistics.median(times[False])
        print(
            f"{name:<11} {len(cases)} case(s): warm probe {warm_s:.2f} s ({imports[True]} torch import(s)), "
            f"second probe {second_s:.2f} s ({imports[False]}); {second_s / warm_s:.2f}x; verdicts {verdicts[True][:3]}",
            flush=True,
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
