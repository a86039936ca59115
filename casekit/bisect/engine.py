"""The bisection engine: evaluate candidates once each, through an on-disk cache of what each target showed.

What a target showed is cached as its raw observations (a "record"), keyed by
(subject, target key): the outcome is recomputed from the record at every
read, so a second bisection of the same subject with another predicate
re-runs nothing. `search_range` checks both ends, then drives the pure search.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casekit import settings
from casekit.bisect.search import UNKNOWN, BisectResult, Outcome, bisect_candidates
from casekit.bundle import from_plain
from casekit.classify import CaseResult
from casekit.errors import BisectError, BundleError
from casekit.fsutil import write_atomic
from casekit.model import ScriptObservation, to_plain
from casekit.runners.interface import ProgressFn, RunnerFactory

RECORD_VERSION = 1  # shape of one cached target record; others are ignored (re-run)

Record = dict[str, Any]


class BisectEndUnknown(BisectError):
    """An end of the range could not be built or run, so the range cannot be trusted."""


def quiet(message: str) -> None:
    """Progress sink for callers that do not want any."""


def default_cache_path() -> Path:
    """$CASEKIT_CACHE/bisect-cache.json (default ~/.cache/casekit), beside the managed envs."""
    return settings.bisect_cache_path()


def registry_runner() -> RunnerFactory:
    """The runner registry's factory, imported when a bisection runs (it pulls in docker and venv)."""
    from casekit.runners.registry import make_runner

    return make_runner


@dataclass(frozen=True)
class CacheSettings:
    """Where target records are kept (None: nowhere, memory only) and whether cached unknowns are re-run."""

    path: Path | None = None
    retry_unknown: bool = False

    @classmethod
    def chosen(cls, path: Path | None = None, *, off: bool = False, retry_unknown: bool = False) -> CacheSettings:
        """What --cache PATH, --no-cache and --retry-unknown ask for: the default file unless told otherwise."""
        return cls(None if off else (path or default_cache_path()), retry_unknown)


class ResultCache:
    """Scalars on disk keyed by (subject, target key), so a bisection resumes; rewritten atomically on each put."""

    SCHEMA = "casekit.bisect-cache/1"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._results: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BisectError(f"result cache {self.path} is unreadable ({exc}); delete it to start afresh") from exc
        if not isinstance(data, dict) or data.get("schema") != self.SCHEMA or not isinstance(data.get("results"), dict):
            raise BisectError(f"result cache {self.path} is not a {self.SCHEMA} file; delete it to start afresh")
        return data["results"]

    def get(self, subject: str, target_key: str) -> Outcome | None:
        """The cached value, or None when this (subject, target) was never evaluated."""
        entry = self._results.get(subject, {}).get(target_key)
        if entry is None:
            return None
        if entry.get("unknown"):
            return UNKNOWN
        outcome: Outcome = entry["outcome"]
        return outcome

    def put(self, subject: str, target_key: str, outcome: Outcome) -> None:
        """Remember a value and write the file at once (the whole point is surviving Ctrl-C)."""
        if outcome is UNKNOWN:
            entry: dict[str, Any] = {"unknown": True}
        elif isinstance(outcome, str | int | float | bool):
            entry = {"outcome": outcome}
        else:
            raise BisectError(f"outcome {outcome!r} cannot be cached: use a string, number, bool or UNKNOWN")
        self._results.setdefault(subject, {})[target_key] = entry
        text = json.dumps({"schema": self.SCHEMA, "results": self._results}, indent=1, sort_keys=True)
        write_atomic(self.path, text)

    def __len__(self) -> int:
        return sum(len(targets) for targets in self._results.values())


class RecordStore:
    """Target records by (subject, target key): in memory, and on disk unless the path is None.

    Before a write the file is re-read under a lock, so two bisections sharing
    the cache add to it rather than overwrite each other.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._disk = ResultCache(path) if path is not None else None
        self._memory: dict[tuple[str, str], Record] = {}

    def get(self, subject: str, key: str) -> Record | None:
        if (subject, key) in self._memory:
            return self._memory[(subject, key)]
        if self._disk is None:
            return None
        stored = self._disk.get(subject, key)
        if not isinstance(stored, str):
            return None
        try:
            record = json.loads(stored)
        except ValueError:
            return None
        return record if isinstance(record, dict) and record.get("v") == RECORD_VERSION else None

    def put(self, subject: str, key: str, record: Record, *, persist: bool = True) -> None:
        self._memory[(subject, key)] = record
        if self.path is None or not persist:
            return
        with self._locked():
            ResultCache(self.path).put(subject, key, json.dumps(record, sort_keys=True))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def observation_record(observation: ScriptObservation) -> dict[str, Any]:
    """An observation as cacheable JSON, without the long log texts classification does not read."""
    plain: dict[str, Any] = to_plain(observation)
    plain.pop("log_excerpt", None)
    plain.pop("stdout_tail", None)
    for site in plain.get("sites", []):
        site.pop("excerpt", None)
    return plain


def observation_from_record(data: Any) -> ScriptObservation | None:
    """Back from JSON; None when the record does not fit (written by another casekit: re-run)."""
    try:
        observation: ScriptObservation = from_plain(ScriptObservation, data, "bisect cache", "observation")
    except BundleError:
        return None
    return observation


def observations_record(observations: dict[str, ScriptObservation], **extra: Any) -> Record:
    """A known target's record: its observations per script, and anything else worth keeping (e.g. torch)."""
    plain = {which: observation_record(observation) for which, observation in observations.items()}
    return {"v": RECORD_VERSION, **extra, "observations": plain}


def observations_from_record(record: Record) -> dict[str, ScriptObservation] | None:
    """The observations of a record, pre before post whatever the JSON order; None if one does not read back."""
    observations: dict[str, ScriptObservation] = {}
    stored = record.get("observations") or {}
    for which, data in sorted(stored.items(), key=lambda item: (item[0] != "pre", item[0])):
        observation = observation_from_record(data)
        if observation is None:
            return None
        observations[which] = observation
    return observations


def unknown_record(why: str) -> Record:
    return {"v": RECORD_VERSION, "unknown": why}


@dataclass
class Fresh:
    """A fresh evaluation's record; `cacheable` False for what may differ next time, `ran` False when nothing ran."""

    record: Record
    cacheable: bool = True
    ran: bool = True
    seconds: float | None = None  # how long it took, when run elsewhere (a probe shared with other cases)


@dataclass
class Evaluated:
    """One candidate's outcome, why, and what was observed (kept for the report's 'what changed')."""

    outcome: Outcome
    detail: str
    observations: dict[str, ScriptObservation]
    result: CaseResult | None = None


@dataclass
class Step:
    """One evaluated candidate, in the order it was tried."""

    target: str
    outcome: str  # "unknown" when it could not be built or run
    detail: str = ""
    cached: bool = False  # read from the cache, not run
    ran: bool = True  # False when nothing could be run (no interpreter for that version)
    seconds: float = 0.0


RunFresh = Callable[[str], Fresh]
Interpret = Callable[[str, Record], "Evaluated | None"]


@dataclass
class Subject:
    """What is bisected, as the engine needs it: cache subject, target keys, fresh runs, record reading, labels."""

    name: str
    target_key: Callable[[str], str]
    run_fresh: RunFresh
    interpret: Interpret
    label: Callable[[str], str] = str


class Evaluator:
    """Evaluate candidates once each: the record from the store, or a fresh run stored at once."""

    def __init__(self, subject: Subject, cache: CacheSettings, progress: ProgressFn) -> None:
        self.subject = subject
        self.store = RecordStore(cache.path)
        self.retry_unknown = cache.retry_unknown
        self.progress = progress
        self.done: dict[str, Evaluated] = {}
        self.steps: list[Step] = []
        self._ran_elsewhere_s: float | None = None

    def label(self, candidate: str) -> str:
        return self.subject.label(candidate)

    def _fresh(self, candidate: str, key: str) -> tuple[Record, bool]:
        fresh = self.subject.run_fresh(candidate)
        self.store.put(self.subject.name, key, fresh.record, persist=fresh.cacheable)
        self._ran_elsewhere_s = fresh.seconds
        return fresh.record, fresh.ran

    def __call__(self, candidate: str) -> Outcome:
        if candidate in self.done:
            return self.done[candidate].outcome
        key = self.subject.target_key(candidate)
        record = self.store.get(self.subject.name, key)
        if record is not None and "unknown" in record and self.retry_unknown:
            record = None
        cached, ran = record is not None, False
        started, self._ran_elsewhere_s = time.monotonic(), None
        if record is None:
            record, ran = self._fresh(candidate, key)
        evaluated = self.subject.interpret(candidate, record)
        if evaluated is None and cached:  # a record this casekit cannot read back: run it again
            record, ran = self._fresh(candidate, key)
            cached = False
            evaluated = self.subject.interpret(candidate, record)
        if evaluated is None:
            evaluated = Evaluated(UNKNOWN, "the observations could not be read back", {})
        seconds = 0.0 if cached else (self._ran_elsewhere_s or time.monotonic() - started)
        self.done[candidate] = evaluated
        self._log(candidate, evaluated, cached, ran, seconds)
        return evaluated.outcome

    def _log(self, candidate: str, evaluated: Evaluated, cached: bool, ran: bool, seconds: float) -> None:
        shown = "unknown" if evaluated.outcome is UNKNOWN else str(evaluated.outcome)
        self.steps.append(Step(candidate, shown, evaluated.detail, cached, ran, seconds))
        how = "cached" if cached else f"{seconds:.1f} s"
        if evaluated.outcome is UNKNOWN:
            shown += f" ({evaluated.detail})" + ("; --retry-unknown runs it again" if cached else "")
        self.progress(f"{self.label(candidate)}: {shown} [{how}]")


def search_range(candidates: list[str], evaluate: Evaluator) -> BisectResult[str] | None:
    """Check both ends first (an unknown end is an error), then bisect the inside; None when the ends agree."""
    interior = len(candidates) - 2
    for index, end in ((0, "good"), (-1, "bad")):
        left = (2 if end == "good" else 1) + interior.bit_length()
        candidate = candidates[index]
        evaluate.progress(
            f"step {len(evaluate.steps) + 1}, ~{left} left: checking the {end} end {evaluate.label(candidate)}"
        )
        if evaluate(candidate) is UNKNOWN:
            raise BisectEndUnknown(
                f"the {end} end {evaluate.label(candidate)} could not be evaluated: "
                f"{evaluate.done[candidate].detail}; pick a {end} end that builds and runs "
                "(or add --retry-unknown if the failure was passing, e.g. the network)"
            )
    if evaluate.done[candidates[0]].outcome == evaluate.done[candidates[-1]].outcome:
        return None

    def on_step(done: int, left: int, candidate: str) -> None:
        if candidate not in evaluate.done:
            evaluate.progress(f"step {done + 1}, ~{left} left: trying {evaluate.label(candidate)}")

    return bisect_candidates(candidates, evaluate, progress=on_step)
