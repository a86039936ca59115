"""casekit replay vs the naive way, side by side in one run (`make bench`).

For the starter archive (9 cases) and a 36-case archive (its cases copied 4x
under distinct ids, same scripts), each measured in this one run:

- naive: one fresh python process per script (torch imported every time), the
  same observations and classification.
- casekit --jobs 1: one probe process for the whole archive (torch imported
  once, a forked child per run, one run at a time) -- `casekit replay --jobs 1`.
- casekit default: the same probe running up to N runs at once (N = the cores
  this target may use) -- plain `casekit replay`.
- serial floor: one torch import + the sum of the per-run times measured inside
  the probe in the --jobs 1 pass (what running every script one by one cannot beat).
- parallel floor: one torch import + that sum / cores.

`--jobs 1` and the default run in alternating pairs (--repeats, default 3) and
each reports its median. Every mode must give the same verdicts (exit status 1 otherwise). The CPU
seconds each mode used (all its processes, sampled from /proc; and the runs'
own CPU as the probe measured it) and the load average around it are printed
too: on a shared machine, wall times alone mislead. --json FILE keeps the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from casekit import probe
from casekit.archive.store import Archive
from casekit.model import Case
from casekit.replay.run import ReplayOptions, TargetRun, run_target
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


def run_times(results: dict, key: str = "wall_s") -> float:
    return sum(run.get(key) or 0.0 for raw in results.values() for run in raw["runs"].values())


@dataclasses.dataclass
class Measured:
    seconds: float
    cpu_s: float  # user + system of every process this mode started (probe, runs, naive pythons)
    load: tuple[float, float]  # 1-minute load average before and after
    verdicts: list[tuple[str, str]]
    sum_of_runs_s: float  # per-run wall times inside the probe(s), summed
    run_cpu_s: float  # per-run CPU seconds the probe measured in each run child, summed


class DescendantCpu:
    """CPU seconds (user + system) of every process below this one, sampled from /proc while it runs.

    rusage of children does not see through the sandbox (its processes are killed, not
    waited for), and system-wide figures count the other users of a shared machine.
    A process is credited with the last value seen: each loses at most one interval.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.seen: dict[tuple[int, str], float] = {}  # (pid, start time) -> CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> DescendantCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def seconds(self) -> float:
        return sum(self.seen.values())

    def _sample(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            stats = {}
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        text = Path(f"/proc/{entry}/stat").read_text()
                    except OSError:
                        continue
                    fields = text[text.rfind(")") + 2 :].split()
                    stats[int(entry)] = (int(fields[1]), fields[19], (int(fields[11]) + int(fields[12])) / self._tick)
            below, stack = set(), [me]
            children: dict[int, list[int]] = {}
            for pid, (parent, _start, _cpu) in stats.items():
                children.setdefault(parent, []).append(pid)
            while stack:
                for child in children.get(stack.pop(), []):
                    below.add(child)
                    stack.append(child)
            for pid in below:
                _parent, start, cpu = stats[pid]
                self.seen[(pid, start)] = cpu
            self._stop.wait(self.interval)


def measure(spec: TargetSpec, cases: list[Case], make: Callable[[TargetSpec], Runner], jobs: int | None) -> Measured:
    """One replay of `cases` on `spec`, as `casekit replay` runs it, with its wall and CPU seconds."""
    walls: list[float] = []
    cpus: list[float] = []

    def factory(s: TargetSpec) -> Runner:
        runner = make(s)
        original = runner.run_probe

        def run_probe(batch_jobs, progress):  # type: ignore[no-untyped-def]
            batch = original(batch_jobs, progress)
            walls.append(run_times(batch.results))
            cpus.append(run_times(batch.results, "cpu_s"))
            return batch

        runner.run_probe = run_probe  # type: ignore[method-assign]
        return runner

    options = ReplayOptions(record=False, verify_rollback=False, jobs=jobs)
    load_before, started = os.getloadavg()[0], time.perf_counter()
    with DescendantCpu() as cpu:
        run: TargetRun = run_target(spec, cases, options, factory, lambda message: None)
    seconds = time.perf_counter() - started
    if run.error:
        raise SystemExit(f"replay failed: {run.error}")
    return Measured(
        seconds=seconds,
        cpu_s=cpu.seconds,
        load=(load_before, os.getloadavg()[0]),
        verdicts=sorted((r.case_id, str(r.verdict)) for r in run.results),
        sum_of_runs_s=sum(walls),
        run_cpu_s=sum(cpus),
    )


def copied_archive(cases: list[Case], copies: int, folder: Path) -> list[Case]:
    """`copies` x the cases as valid bundles with distinct ids (same scripts), saved and loaded back."""
    archive = Archive(folder)
    for case in cases:
        for k in range(copies):
            archive.save(dataclasses.replace(case, id=case.id if k == 0 else f"{case.id}-copy{k}"))
    return archive.load_all()


def median_run(runs: list[Measured]) -> Measured:
    return sorted(runs, key=lambda m: m.seconds)[len(runs) // 2]


def bench_archive(
    spec: TargetSpec, cases: list[Case], one_import: float, cores: int, naive: bool, repeats: int = 1
) -> dict[str, Any]:
    """Every mode on one archive; the figures, printed and returned.

    `--jobs 1` and the default run in alternating pairs, `repeats` times, and each mode's
    median run is reported: a shared machine drifts, and a pair taken side by side drifts together."""
    modes: dict[str, Measured] = {}
    if naive:
        modes["naive"] = measure(spec, cases, lambda s: OneProcessPerScript(make_runner(s)), None)
    pairs = [(measure(spec, cases, make_runner, 1), measure(spec, cases, make_runner, None)) for _ in range(repeats)]
    modes["jobs_1"] = median_run([one for one, _ in pairs])
    modes["jobs_default"] = median_run([default for _, default in pairs])
    runs_s = modes["jobs_1"].sum_of_runs_s  # measured one at a time: no contention inside the probe
    serial_floor, parallel_floor = one_import + runs_s, one_import + runs_s / cores
    every_run = list(modes.values()) + [m for pair in pairs for m in pair]
    verdicts = {m.verdicts == modes["jobs_1"].verdicts for m in every_run}
    figures: dict[str, Any] = {
        "cases": len(cases),
        "scripts": sum(1 + (case.post is not None) for case in cases),
        "default_jobs": probe.default_parallel_runs(cores),
        "serial_floor_s": round(serial_floor, 2),
        "parallel_floor_s": round(parallel_floor, 2),
        "sum_of_runs_s": round(runs_s, 2),
        "same_verdicts": verdicts == {True},
    }
    print(f"\n{len(cases)} cases, {figures['scripts']} scripts; default --jobs {figures['default_jobs']}")
    for name, m in modes.items():
        figures[name] = {
            "seconds": round(m.seconds, 2),
            "cpu_s": round(m.cpu_s, 2),
            "run_cpu_s": round(m.run_cpu_s, 2),
            "sum_of_runs_s": round(m.sum_of_runs_s, 2),
            "load_before_after": [round(x, 2) for x in m.load],
        }
        print(
            f"  {name:<13} {m.seconds:7.1f} s wall  {m.cpu_s:6.1f} s CPU (runs: {m.sum_of_runs_s:5.1f} s wall, "
            f"{m.run_cpu_s:5.1f} s CPU)  load {m.load[0]:.1f} -> {m.load[1]:.1f}"
        )
    if repeats > 1:
        figures["pairs"] = [[round(one.seconds, 2), round(default.seconds, 2)] for one, default in pairs]
        print(
            f"  {repeats} pairs (--jobs 1, default): "
            + ", ".join(
                f"{one.seconds:.1f}/{default.seconds:.1f} s = {one.seconds / default.seconds:.2f}x"
                for one, default in pairs
            )
            + "; medians above"
        )
    print(f"  serial floor  {serial_floor:7.1f} s  (1 import {one_import:.1f} s + runs {runs_s:.1f} s)")
    print(f"  parallel floor{parallel_floor:7.1f} s  (1 import + runs / {cores} cores)")
    default, jobs_1 = modes["jobs_default"].seconds, modes["jobs_1"].seconds
    figures["default_speedup_vs_jobs_1"] = round(jobs_1 / default, 2)
    figures["default_over_parallel_floor"] = round(default / parallel_floor, 2)
    figures["jobs_1_over_serial_floor"] = round(jobs_1 / serial_floor, 2)
    print(f"  default vs --jobs 1:      {jobs_1 / default:5.2f}x faster   (goal >= 1.7x on 36 cases, 2 cores)")
    print(f"  default / parallel floor: {default / parallel_floor:5.2f}x          (goal <= 1.3x)")
    print(f"  --jobs 1 / serial floor:  {jobs_1 / serial_floor:5.2f}x")
    if "naive" in modes:
        figures["default_speedup_vs_naive"] = round(modes["naive"].seconds / default, 2)
        print(f"  default vs naive:         {modes['naive'].seconds / default:5.2f}x faster")
    print(f"  same verdicts in every mode: {figures['same_verdicts']}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", default="cases")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--copies", type=int, default=4, help="the larger archive: the cases copied this many times")
    parser.add_argument("--naive-large", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--repeats", type=int, default=3, help="alternating --jobs 1 / default pairs; medians reported")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cases = Archive(Path(args.archive)).load_all()
    spec = TargetSpec(runner="python", python=args.python)
    cores = probe.available_cpus()
    one_import = import_seconds(args.python, 2)
    print(f"python {args.python}; {cores} core(s) available; one torch import {one_import:.1f} s")
    print(f"load average now: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (a shared machine inflates wall times)")
    figures: dict[str, Any] = {"cores": cores, "one_import_s": round(one_import, 2)}
    figures["starter"] = bench_archive(spec, cases, one_import, cores, naive=True, repeats=args.repeats)
    with tempfile.TemporaryDirectory(prefix="casekit-bench-") as folder:
        large = copied_archive(cases, args.copies, Path(folder))
        figures["large"] = bench_archive(spec, large, one_import, cores, naive=args.naive_large, repeats=args.repeats)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if figures["starter"]["same_verdicts"] and figures["large"]["same_verdicts"] else 1


if __name__ == "__main__":
    sys.exit(main())
