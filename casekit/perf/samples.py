"""One perf run of the probe (a fresh process: a fork of a warm probe that never compiled) as the values
perf judges: its compile time, the phases of that compile, whether the compile caches missed or hit,
its steady-state blocks, and the structure that explains them."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from casekit.model import PerfStructure, ScriptObservation, ScriptStatus
from casekit.observe import interpret

FIRST_CALLS = 3  # the calls whose time is the compile: the first, and the early recompiles after it

# A release's compile phases, from its CompilationMetrics: 2.13's cumulative _us fields, 2.5.1's _s ones
PHASES_US = {
    "dynamo": "dynamo_cumulative_compile_time_us",
    "aot_autograd": "aot_autograd_cumulative_compile_time_us",
    "inductor": "inductor_cumulative_compile_time_us",
    "codegen": "inductor_code_gen_cumulative_compile_time_us",
    "triton": "triton_compile_time_us",
    "autotune": "compile_time_autotune_time_us",
    "gc": "gc_time_us",
    "guard_latency": "guard_latency_us",
}
PHASES_S = {
    "frame": "entire_frame_compile_time_s",
    "backend": "backend_compile_time_s",
    "inductor": "inductor_compile_time_s",
    "codegen": "code_gen_time_s",
}


@dataclass
class Block:
    """One timed block of one process: each arm's time per call, summed over the entry points."""

    eager: float
    compiled: float

    @property
    def speedup(self) -> float:
        return self.eager / self.compiled if self.compiled > 0 else 0.0


@dataclass
class ProcessSample:
    """What one fresh process measured."""

    cache: str  # "cold" | "warm"
    status: ScriptStatus
    detail: str = ""
    compile_s: float | None = None  # the first FIRST_CALLS calls of every entry point, summed
    phases: dict[str, float] = field(default_factory=dict)
    cache_hits: int = 0
    cache_misses: int = 0
    blocks: list[Block] = field(default_factory=list)
    steady_unavailable: str = ""
    instructions: int | None = None
    instructions_unavailable: str = ""
    threads: int = 1
    structure: PerfStructure = field(default_factory=PerfStructure)
    round: int | None = None  # the warm round whose processes took turns (casekit.perf.measure), if any
    spans: list[tuple[float, float]] = field(default_factory=list)  # each block's start and end (monotonic)
    settle_calls: int = 0  # calls made before the blocks until one compiled nothing (probe.settle)
    compiled_in_blocks: int | None = None  # frames Dynamo converted while the blocks ran (None: not counted)

    @property
    def ok(self) -> bool:
        return self.status is ScriptStatus.OK

    # A process's time per call is its fastest block: on a shared host other work only ever adds time, so the
    # minimum is the least disturbed figure (the interleaved arms, min per arm, of the benchmarks this follows).
    # The speed-up is taken block by block, eager and compiled adjacent: the machine's drift cancels there (the
    # steady verdict is judged on compiled blocks against the baseline's beside them: casekit.perf.compare).
    def steady(self) -> float | None:
        return min(b.compiled for b in self.blocks) if self.blocks else None

    def eager(self) -> float | None:
        return min(b.eager for b in self.blocks) if self.blocks else None

    def speedup(self) -> float | None:
        return statistics.median(b.speedup for b in self.blocks) if self.blocks else None


def read_sample(
    raw: Mapping[str, Any] | None, failure: str, cache: str, script_name: str, source: str
) -> ProcessSample:
    """A probe result of one perf job (None: `failure` says why there is none)."""
    if raw is None:
        return ProcessSample(cache, ScriptStatus.CRASHED, failure)
    run = (raw.get("runs") or {}).get("perf")
    if not isinstance(run, dict):
        return ProcessSample(cache, ScriptStatus.CRASHED, "the probe made no perf run")
    observation = interpret({**raw, "runs": {"compiled": run}}, str(raw.get("script", "")), script_name, source)
    sample = ProcessSample(cache, observation.status, observation.detail, structure=structure_of(observation, run))
    if not sample.ok:
        return sample
    sample.compile_s = _first_calls_seconds(run)
    metrics = [m for m in run.get("compilation_metrics") or [] if isinstance(m, dict)]
    sample.phases = phases_of(metrics)
    sample.cache_hits, sample.cache_misses = _cache_counts(run.get("counters") or {})
    steady: dict[str, Any] = run["steady"] if isinstance(run.get("steady"), dict) else {}
    sample.threads = int(steady.get("threads") or 1)
    sample.blocks, sample.steady_unavailable = _blocks(steady.get("entries") or {})
    sample.spans = _spans(steady.get("spans"))
    entries: dict[str, Any] = steady["entries"] if isinstance(steady.get("entries"), dict) else {}
    settled = [e.get("settle_calls") for e in entries.values() if isinstance(e, dict)]
    sample.settle_calls = max([n for n in settled if isinstance(n, int) and not isinstance(n, bool)], default=0)
    in_blocks = steady.get("compiled_in_blocks")
    sample.compiled_in_blocks = in_blocks if isinstance(in_blocks, int) and not isinstance(in_blocks, bool) else None
    counted = steady.get("instructions")
    counter: dict[str, Any] = run["instructions"] if isinstance(run.get("instructions"), dict) else {}
    if counter.get("available") and isinstance(counted, int):
        sample.instructions = counted
    else:
        sample.instructions_unavailable = str(counter.get("why") or "not counted")
    return sample


def _first_calls_seconds(run: Mapping[str, Any]) -> float | None:
    seen: dict[str, int] = {}
    total = 0.0
    for call in run.get("calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("seconds"), (int, float)):
            continue
        name = str(call.get("entry"))
        seen[name] = seen.get(name, 0) + 1
        if seen[name] <= FIRST_CALLS:
            total += float(call["seconds"])
    return total if seen else None


def phases_of(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per compile phase, summed over the frames compiled (the release's own fields)."""
    found: dict[str, float] = {}
    for names, scale in ((PHASES_US, 1e-6), (PHASES_S, 1.0)):
        for phase, key in names.items():
            values = [m[key] for m in metrics if isinstance(m.get(key), (int, float)) and not m.get("is_runtime")]
            if values and phase not in found:
                found[phase] = round(sum(values) * scale, 6)
        if found:
            return found  # the newer fields when the release has them
    return found


def _cache_counts(counters: Mapping[str, Any]) -> tuple[int, int]:
    """(hits, misses) of the FX graph and AOT autograd caches, as torch's own counters tell."""
    inductor = counters.get("inductor") or {}
    aot = counters.get("aot_autograd") or {}
    hits = int(inductor.get("fxgraph_cache_hit", 0)) + int(aot.get("autograd_cache_hit", 0))
    misses = int(inductor.get("fxgraph_cache_miss", 0)) + int(aot.get("autograd_cache_miss", 0))
    return hits, misses


def _blocks(entries: Mapping[str, Any]) -> tuple[list[Block], str]:
    """The blocks of every entry point summed block by block (one call of each); why none, if none."""
    timed = {name: e for name, e in entries.items() if isinstance(e, dict) and isinstance(e.get("blocks"), list)}
    unavailable = [
        f"{name}: {e.get('unavailable')}" for name, e in entries.items() if isinstance(e, dict) and e.get("unavailable")
    ]
    if not timed:
        return [], "; ".join(unavailable) or "no entry point was called"
    count = min(len(e["blocks"]) for e in timed.values())
    blocks = []
    for index in range(count):
        rows = [e["blocks"][index] for e in timed.values()]
        if all(
            isinstance(r, dict) and isinstance(r.get("eager"), float) and isinstance(r.get("compiled"), float)
            for r in rows
        ):
            blocks.append(Block(sum(r["eager"] for r in rows), sum(r["compiled"] for r in rows)))
    return blocks, "; ".join(unavailable)


def _spans(raw: Any) -> list[tuple[float, float]]:
    if not isinstance(raw, list):
        return []
    return [
        (float(span[0]), float(span[1]))
        for span in raw[:10000]
        if isinstance(span, list) and len(span) == 2 and all(isinstance(t, (int, float)) for t in span)
    ]


def structure_of(observation: ScriptObservation, run: Mapping[str, Any]) -> PerfStructure:
    """The run's structure: graphs and operators per graph, breaks by id and place, recompiles, frames that
    ran eagerly, guards and the cudagraph skip reason where the release records them."""
    graphs = [g for g in run.get("graphs") or [] if isinstance(g, dict)]
    metrics = [m for m in run.get("compilation_metrics") or [] if isinstance(m, dict)]
    guards = [m["guard_count"] for m in metrics if isinstance(m.get("guard_count"), int)]
    skips = [m["cudagraph_skip_reason"] for m in metrics if isinstance(m.get("cudagraph_skip_reason"), str)]
    return PerfStructure(
        graphs=len(graphs),
        ops_per_graph=[int(g.get("ops") or 0) for g in graphs],
        breaks=sorted(f"{site.gb_id or site.category} at {site.file}:{site.line}" for site in observation.sites),
        recompiles=len(observation.recompiles),
        eager_frames=[f"{f.function} ({f.file}:{f.line})" for f in observation.fallback_frames],
        guards=sum(guards) if guards else None,
        cudagraph_skip=skips[0] if skips else None,
    )
