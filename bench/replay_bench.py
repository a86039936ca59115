"""casekit replay vs the naive way, side by side in one run (`make bench`).

- casekit: one probe process for the whole archive (torch imported once, a forked
  child per run), then classification — exactly what `casekit replay` does.
- naive: one fresh python process per script (torch imported every time), the
  same observations and classification.
- floor: one torch import + the sum of the per-script run times measured inside
  the probe (what no scheme that really runs every script can beat).

Prints the times and the ratios; --json FILE keeps them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from casekit.archive import Archive
from casekit.replay import ReplayOptions, run_target
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn, Runner, TargetSpec
from casekit.runners.registry import make_runner


class OneProcessPerScript(Runner):
    """The naive runner: a fresh interpreter (and torch import) for every script."""

    name = "naive"

    def __init__(self, inner: Runner) -> None:
        super().__init__(inner.spec)
        self.inner = inner

    def prepare(self, progress: ProgressFn) -> None:
        self.inner.prepare(progress)

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        merged = ProbeBatchResult(environment={}, results={}, failed={}, import_s=0.0, wall_s=0.0)
        for job in jobs:
            batch = self.inner.run_probe([job], progress)
            merged.environment = batch.environment
            merged.results.update(batch.results)
            merged.failed.update(batch.failed)
        return merged


def import_seconds(python: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([python, "-c", "import torch, torch._dynamo"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return min(times)


def run_times(results: dict) -> float:
    return sum(run.get("wall_s") or 0.0 for raw in results.values() for run in raw["runs"].values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", default="cases")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cases = Archive(Path(args.archive)).load_all()
    spec = TargetSpec(runner="python", python=args.python)
    options = ReplayOptions(record=False, verify_rollback=False)
    quiet: ProgressFn = lambda message: None  # noqa: E731
    scripts = sum(1 + (case.post is not None) for case in cases)
    print(f"{len(cases)} cases, {scripts} scripts, python {args.python}")

    probe_walls: list[float] = []

    def casekit_runner(s: TargetSpec) -> Runner:
        runner = make_runner(s)
        original = runner.run_probe

        def run_probe(jobs, progress):  # type: ignore[no-untyped-def]
            batch = original(jobs, progress)
            probe_walls.append(run_times(batch.results))
            return batch

        runner.run_probe = run_probe  # type: ignore[method-assign]
        return runner

    started = time.perf_counter()
    casekit_run = run_target(spec, cases, options, casekit_runner, quiet)
    casekit_s = time.perf_counter() - started

    started = time.perf_counter()
    naive_run = run_target(spec, cases, options, lambda s: OneProcessPerScript(make_runner(s)), quiet)
    naive_s = time.perf_counter() - started

    one_import = import_seconds(args.python, 2)
    floor_s = one_import + sum(probe_walls)
    same = [r.verdict for r in casekit_run.results] == [r.verdict for r in naive_run.results]
    figures = {
        "cases": len(cases),
        "scripts": scripts,
        "casekit_s": round(casekit_s, 2),
        "naive_s": round(naive_s, 2),
        "floor_s": round(floor_s, 2),
        "one_import_s": round(one_import, 2),
        "sum_of_runs_s": round(sum(probe_walls), 2),
        "speedup_vs_naive": round(naive_s / casekit_s, 2),
        "casekit_over_floor": round(casekit_s / floor_s, 2),
        "same_verdicts": same,
    }
    print(f"casekit replay (one import):     {casekit_s:7.1f} s")
    print(f"naive (one python per script):   {naive_s:7.1f} s")
    print(
        f"floor (1 import + sum of runs):  {floor_s:7.1f} s  (import {one_import:.1f} s + runs {sum(probe_walls):.1f} s)"
    )
    print(f"speed-up vs naive:  {naive_s / casekit_s:5.2f}x   (goal >= 5x)")
    print(f"casekit / floor:    {casekit_s / floor_s:5.2f}x   (goal <= 1.5x)")
    print(f"same verdicts both ways: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
