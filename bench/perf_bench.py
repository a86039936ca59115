"""Does `--perf` cry wolf, and does it see a real change? (`make bench`)

Two sides, each a warm session of this interpreter (the python runner), timed with replay --perf's own
protocol and defaults (casekit.perf.measure: fresh processes, baseline-target-baseline rounds whose timed
blocks take turns, more rounds while a verdict is open) and judged by its rule (casekit.perf.judge):

- A/A: both sides the same build and script, --aa times: every `slower`/`faster` is a false alarm (the
  issue's bound: at most 1 in 100 comparisons);
- injected: the second side's compiled path does 10 % more work (the same script, 22 matrix products
  instead of 20), --injected times: `slower` on the steady axis is the right answer (at least 9 of 10 on a
  quiet machine). Its size in time is measured, not assumed: each comparison's eager change (the same
  products, run eagerly, beside the baseline's in turns) is kept, and the summary gives their median. With
  16-row inputs a call's fixed cost (guards, Python, 20 tanh kernels) made the 10 % more work 8.3 % more
  time (measured alone here: +8.25 %, the bench's steady changes averaged +8.3 %); with 64 rows, +9.3 %.

The script compiles with Inductor (the default backend). Cold compiles are left out (--cold 0: the A/A
bound is about the axes judged with several processes; a cold compile is one process a side by default).
Every comparison prints its verdicts, the change and the A/A noise floor per axis; the summary gives the
counts, the blocks and processes used, the floors seen and the host's load. JSON with --json, rewritten after
every comparison, so an interrupted bench keeps what it measured.

Cost on 2 cores: a comparison is 15-24 fresh processes of about 2-3 s each (importing torch, a warm compile
from the kept cache, the blocks), a median 49 s, so the default 100 A/A comparisons take about 1.5 hours
(`make bench BENCH_PERF_ARGS='--aa 20'` for a shorter look; 20 comparisons cannot show a 1-in-100 bound).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from casekit.model import PerfAxis, PerfVerdict, ScriptRole
from casekit.perf.compare import compare, wants_more
from casekit.perf.measure import PerfSubject, PerfTarget, load_average, measure_subject
from casekit.perf.phase import PRELOAD
from casekit.perf.settings import PerfSettings, parse_repeats
from casekit.runners.interface import ProbeScheduling, ScriptEntry
from casekit.runners.sandbox import Sandbox
from casekit.runners.warm import WarmSession

SCRIPT = """\
import os

import torch

WORK = int(os.environ.get("PERF_BENCH_PRODUCTS", "20"))  # matrix products in the compiled function


def step(x, w):
    for _ in range(WORK):
        x = torch.tanh(x @ w)
    return x


compiled = torch.compile(step)
x, w = torch.randn(64, 96), torch.randn(96, 96) / 10
for _ in range(3):
    compiled(x, w)
"""


def session(products: int) -> WarmSession:
    env = {"PERF_BENCH_PRODUCTS": str(products)}
    opened = WarmSession(sys.executable, ScriptEntry.PERF, Sandbox.from_options(), env, ProbeScheduling(1, 1, True))
    opened.preload = list(PRELOAD)
    return opened


def compare_once(subject: PerfSubject, a: PerfTarget, b: PerfTarget, settings: PerfSettings) -> dict:
    measured = measure_subject(
        subject,
        [a, b],
        settings,
        lambda message: None,
        lambda m: wants_more(m.samples, m.baseline_halves, settings, a.label),
    )
    comparison = compare(
        measured.samples[b.label], measured.samples[a.label], measured.baseline_halves, settings, a.label
    )
    blocks = sum(len(s.blocks) for samples in measured.samples.values() for s in samples)
    return {
        "verdicts": {axis.axis.value: axis.verdict.value for axis in comparison.axes},
        "changes": {axis.axis.value: axis.change for axis in comparison.axes},
        "floors": {axis.axis.value: axis.floor for axis in comparison.axes},
        "why": {axis.axis.value: axis.why for axis in comparison.axes},
        "eager_change": comparison.eager_change,
        "processes": {label: len(samples) for label, samples in measured.samples.items()},
        "blocks": blocks,
        "seconds": round(measured.seconds, 1),
        "load": load_average(),
        # every process's figures in the order it ran, so another rule can be tried on what was measured
        "raw": {
            label: [
                {
                    "steady": s.steady(),
                    "eager": s.eager(),
                    "speedup": s.speedup(),
                    "compile": s.compile_s,
                    "round": s.round,
                    "blocks": [[block.eager, block.compiled] for block in s.blocks],
                    "spans": s.spans,
                }
                for s in samples
            ]
            for label, samples in measured.samples.items()
        },
    }


def run(
    kind: str, times: int, extra: int, settings: PerfSettings, folder: Path, found: list[dict], save: Callable[[], None]
) -> list[dict]:
    """`times` comparisons of A against B (B `extra` products heavier), each appended to `found` and saved at
    once: 100 A/A comparisons take hours on 2 cores, and an interrupted bench keeps what it measured."""
    script = folder / "bench.py"
    script.write_text(SCRIPT)
    subject = PerfSubject("bench", ScriptRole.PRE, script.name, SCRIPT, script)
    a, b = session(20), session(20 + extra)
    try:
        targets = (PerfTarget("A", a), PerfTarget("B", b))
        for index in range(times):
            result = compare_once(subject, *targets, settings)
            found.append(result)
            save()
            called = {k: v for k, v in result["verdicts"].items() if v in ("slower", "faster")}
            floors = ", ".join(f"{k} {v:.1%}" for k, v in result["floors"].items() if v is not None)
            print(
                f"{kind} {index + 1}/{times}: {result['verdicts']} called={called or '-'} floors: {floors}; "
                f"{result['processes']} processes, {result['blocks']} blocks, {result['seconds']} s, {result['load']}",
                flush=True,
            )
    finally:
        a.close()
        b.close()
    return found


def summary(kind: str, results: list[dict]) -> dict:
    counts: Counter[str] = Counter()
    for result in results:
        for axis, verdict in result["verdicts"].items():
            counts[f"{axis}:{verdict}"] += 1
    floors = {
        axis: [r["floors"][axis] for r in results if r["floors"].get(axis) is not None]
        for axis in (a.value for a in PerfAxis)
    }
    return {
        "kind": kind,
        "comparisons": len(results),
        "called": sum(1 for r in results if any(v in ("slower", "faster") for v in r["verdicts"].values())),
        "steady_slower": sum(1 for r in results if r["verdicts"].get("steady") == PerfVerdict.SLOWER.value),
        "counts": dict(sorted(counts.items())),
        "median_floor": {axis: statistics.median(v) for axis, v in floors.items() if v},
        "max_floor": {axis: max(v) for axis, v in floors.items() if v},
        "median_processes": statistics.median(sum(r["processes"].values()) for r in results) if results else 0,
        "median_blocks": statistics.median(r["blocks"] for r in results) if results else 0,
        "median_seconds": statistics.median(r["seconds"] for r in results) if results else 0,
        # the change's size in time: eager's own change against the baseline (the same work, run eagerly)
        "median_eager_change": statistics.median(eager)
        if (eager := [r["eager_change"] for r in results if r.get("eager_change") is not None])
        else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aa", type=int, default=100, help="A/A comparisons [100]")
    parser.add_argument("--injected", type=int, default=10, help="comparisons with a 10 %% heavier side [10]")
    parser.add_argument("--cold", type=int, default=0, help="cold processes a side per comparison [0]")
    parser.add_argument("--repeats", help="as replay's --perf-repeats, e.g. warm=8,max=8 [the defaults]")
    parser.add_argument("--json", type=Path, help="write every comparison (each process's figures too) here")
    args = parser.parse_args()
    settings = replace(PerfSettings(), cold=args.cold)
    if args.repeats:
        settings = parse_repeats(args.repeats, settings)
    folder = Path(tempfile.mkdtemp(prefix="perf-bench-"))
    started = time.monotonic()
    results: dict[str, list[dict]] = {"aa": [], "injected": []}

    def save() -> None:
        if args.json:
            summaries = [summary("A/A", results["aa"]), summary("injected +10 %", results["injected"])]
            partial = args.json.with_name(args.json.name + ".part")
            partial.write_text(json.dumps({"results": results, "summary": summaries}, indent=1))
            partial.replace(args.json)

    run("A/A", args.aa, 0, settings, folder, results["aa"], save)
    run("+10 %", args.injected, 2, settings, folder, results["injected"], save)
    summaries = [summary("A/A", results["aa"]), summary("injected +10 %", results["injected"])]
    for item in summaries:
        print(json.dumps(item))
    aa, injected = summaries
    print(
        f"A/A: {aa['called']} of {aa['comparisons']} comparisons called a change (bound: at most 1 in 100); "
        f"+10 %: steady slower in {injected['steady_slower']} of {injected['comparisons']} (at least 9 of 10 on a quiet "
        f"machine); {time.monotonic() - started:.0f} s in all; {load_average()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
