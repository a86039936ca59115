"""Running candidates: a batch of them in the warm probe, each observed, placed and judged by the oracle.

One torch import for the whole reduction (the runner's warm session: the same
sandbox as replay's runs, a fork per run), `jobs` runs side by side in one
request. A candidate's eager run must pass before it is compiled (a probe job
flag: a candidate that fails eagerly is refused anyway). After the original's
first run the probe imports the libraries that run imported, once, so no
candidate pays for `import transformers` again.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from casekit.model import IncludedFile, ScriptObservation, ScriptSource, ScriptStatus
from casekit.observe.batch import observe_batch
from casekit.reduce.judge.oracle import Judgement, Oracle, Placement
from casekit.reduce.source.candidate import Candidate
from casekit.reduce.source.lines import OriginalIndex
from casekit.runners.interface import ProbeJob, ProbeSession, ProgressFn
from casekit.scrub import temp_prefix


@dataclass
class CandidateJob(ProbeJob):
    """A probe job for a reducer: compiled runs only after a passing eager run; optionally, the modules
    the run imported (what the warm probe may preload)."""

    eager_must_pass: bool = True
    report_modules: bool = False
    trace_lines: bool = False  # the eager run records the lines it ran in the job's own files
    call_sites: bool = False  # each compiled call records where in the job's own files it was made

    def to_request(self, script_path: str) -> dict[str, object]:
        request = super().to_request(script_path)
        request["eager_must_pass"] = self.eager_must_pass
        request["report_modules"] = self.report_modules
        request["trace_lines"] = self.trace_lines
        request["call_sites"] = self.call_sites
        return request


@dataclass(frozen=True)
class Layout:
    """What every candidate shares: the script's name, the files kept as they are, the original indexes."""

    script: str
    fixed: tuple[IncludedFile, ...]  # included files that are not reduced (data, configs, non-Python)
    indexes: dict[str, OriginalIndex]

    def placement_of(self, candidate: Candidate) -> Placement:
        lines = {}
        for name, rendered in candidate.files.items():
            if rendered is not None:
                mapped = rendered.lines
                lines[name] = (lambda m: lambda line: (m[line - 1] or None) if 0 < line <= len(m) else None)(mapped)
        texts = {name: index.line_text for name, index in self.indexes.items()}
        return Placement(lines, texts)


def included(path: str, text: str) -> IncludedFile:
    return IncludedFile(path=path, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), text=text)


@dataclass
class CandidateStats:
    run: int = 0  # candidates run in the probe
    cached: int = 0  # answered from an earlier run of the same text
    kept: int = 0
    alone: int = 0  # run again alone after a timeout, a crash or a lost probe beside others
    batches: int = 0
    seconds: float = 0.0  # in the probe
    recent: float = 0.0  # a batch's seconds lately (a moving average: candidates shrink as the search goes)
    refusals: dict[str, int] = field(default_factory=dict)  # the oracle's reasons, first words


class CandidateProbe:
    """Judges candidates: laid out as probe jobs, run in the warm probe, observed, placed, judged."""

    def __init__(
        self, probe: ProbeSession, layout: Layout, oracle: Oracle, timeout: float, progress: ProgressFn, backend: str
    ) -> None:
        self.probe, self.layout, self.oracle = probe, layout, oracle
        self.timeout, self.progress, self.backend = timeout, progress, backend
        self.cache: dict[str, Judgement] = {}
        self.stats = CandidateStats()
        self._counter = 0

    def jobs_for(self, candidates: Sequence[Candidate]) -> list[CandidateJob]:
        jobs = []
        for candidate in candidates:
            self._counter += 1
            job_id = f"c{self._counter}"
            # the candidate's own folder, removed once its batch ran (the session copies it into its request)
            folder = Path(tempfile.mkdtemp(prefix=temp_prefix("reduce")))
            script = candidate.files[self.layout.script]
            assert script is not None
            path = folder / self.layout.script
            path.write_text(script.text, encoding="utf-8")
            reduced = tuple(
                included(name, rendered.text)
                for name, rendered in sorted(candidate.files.items())
                if name != self.layout.script and rendered is not None
            )
            jobs.append(
                CandidateJob(
                    id=job_id,
                    script=path,
                    backend=self.backend,
                    timeout=self.timeout,
                    includes=reduced + self.layout.fixed,
                )
            )
        return jobs

    def observe(self, candidates: Sequence[Candidate]) -> list[ScriptObservation]:
        """Run candidates side by side in the warm probe; their observations, placed in the original's lines."""
        if not candidates:
            return []
        jobs = self.jobs_for(candidates)
        started = time.monotonic()
        try:
            batch = self.probe.run_probe(list(jobs), lambda message: None)
        finally:
            for job in jobs:
                shutil.rmtree(job.script.parent, ignore_errors=True)
        took = time.monotonic() - started
        self.stats.seconds += took
        self.stats.recent = took if not self.stats.batches else 0.7 * self.stats.recent + 0.3 * took
        self.stats.batches += 1
        observations = []
        for job, candidate in zip(jobs, candidates, strict=True):
            script = candidate.files[self.layout.script]
            assert script is not None
            source = ScriptSource(self.layout.script, hashlib.sha256(script.text.encode()).hexdigest(), script.text)
            observed = observe_batch(batch, job, source)
            observations.append(self.layout.placement_of(candidate).observation(observed))
        return observations

    def judge(self, candidates: Sequence[Candidate]) -> list[Judgement]:
        """The oracle's answer for each candidate (one probe batch for those not seen before)."""
        fresh: dict[str, Candidate] = {}
        for candidate in candidates:
            if candidate.key not in self.cache and candidate.key not in fresh:
                fresh[candidate.key] = candidate
        self.stats.cached += len(candidates) - len(fresh)
        if fresh:
            observations = self.observe(list(fresh.values()))
            if len(fresh) > 1:
                observations = self._alone_again(list(fresh.values()), observations)
            for candidate, observation in zip(fresh.values(), observations, strict=True):
                judgement = self.oracle.judge(observation)
                self.cache[candidate.key] = judgement
                if not judgement.kept:
                    reason = judgement.why.split(":")[0][:40]
                    self.stats.refusals[reason] = self.stats.refusals.get(reason, 0) + 1
            self.stats.run += len(fresh)
        answers = [self.cache[c.key] for c in candidates]
        self.stats.kept += sum(1 for a in answers if a.kept)
        return answers

    def _alone_again(
        self, candidates: list[Candidate], observations: list[ScriptObservation]
    ) -> list[ScriptObservation]:
        """A candidate that timed out, crashed or came back empty beside others runs again alone: its bound is
        the original's pace, which runs side by side on a loaded host can pass, and a worker lost for memory
        is lost for its neighbours' too. Its answer must not depend on `--jobs` or on what ran beside it; one
        that loops or crashes alone too is refused as before (one run more)."""
        again = []
        for candidate, observation in zip(candidates, observations, strict=True):
            if observation.status in (ScriptStatus.TIMEOUT, ScriptStatus.CRASHED, ScriptStatus.ENV_FAILED):
                self.stats.alone += 1
                self.progress(f"a candidate's run ended {observation.status.value} beside others: running it alone")
                observation = self.observe([candidate])[0]
            again.append(observation)
        return again

    def answers(self, candidates: Sequence[Candidate]) -> list[bool]:
        return [j.kept for j in self.judge(candidates)]
