"""Every time bound casekit puts on a run, in one place.

A case records the timeout it was captured with and how long its runs took;
replay derives each case's bound from them, so one hanging case cannot stall a
replay for the 300 s default when it ran in two seconds at capture.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

from casekit.errors import CasekitError
from casekit.model import CaptureRecord
from casekit.outcome import check_seconds

DEFAULT_RUN_TIMEOUT_S = 300.0  # a case captured before timeouts were recorded
REPLAY_FLOOR_S = 30.0  # never less: a cold import cache or a slower machine must not turn into a timeout
REPLAY_FACTOR = 5.0  # times the slowest run observed at capture


class BadTimeout(CasekitError):
    """A run bound that is not a finite number of seconds above zero: a capture refused (exit 1)."""

    exit_code = 1


class TimedJob(Protocol):
    timeout: float
    modes: tuple[str, ...]


def check_timeout(seconds: float, option: str = "--timeout") -> float:
    """A capture's run bound: the one flag check (outcome.check_seconds), refused as a capture (exit 1)."""
    try:
        return check_seconds(option, seconds)
    except CasekitError as error:
        raise BadTimeout(str(error)) from None


def replay_run_timeout(record: CaptureRecord | None, override: float | None) -> float:
    """The bound of one run of a case on replay: the override, else derived from what capture saw."""
    if override is not None:
        return check_seconds("--timeout", override)
    if record is None:
        return DEFAULT_RUN_TIMEOUT_S
    slowest = max(record.run_seconds.values(), default=None)
    derived = max(REPLAY_FLOOR_S, REPLAY_FACTOR * slowest) if slowest is not None else DEFAULT_RUN_TIMEOUT_S
    return min(derived, record.timeout_s) if record.timeout_s else derived


def recorded_run_seconds(record: CaptureRecord | None) -> float | None:
    """What a case's runs took at capture, added up (eager and compiled, pre and post): what one
    replay of it costs, for planning shards. None when nothing usable was recorded."""
    if record is None:
        return None
    # a forged or broken bundle may hold anything: only finite, non-negative seconds count
    seconds = [
        value for value in record.run_seconds.values() if isinstance(value, (int, float)) and math.isfinite(value)
    ]
    usable = [value for value in seconds if value >= 0]
    return round(sum(usable), 3) if usable else None


def batch_timeout(jobs: Iterable[TimedJob], import_allowance_s: float) -> float:
    """A whole probe batch: every run of every job at its own bound, plus the one torch import."""
    return import_allowance_s + sum(job.timeout * max(1, len(job.modes)) for job in jobs)


REDUCE_FLOOR_S = 10.0  # a reducer's candidate: never less (a run under load, a first compile)
REDUCE_FACTOR = 4.0  # times the slowest run of the original


def reduce_run_timeout(slowest_s: float, cap: float) -> float:
    """The bound of one run of a reducer's candidate: derived from the original's slowest run, at most `cap`
    (a candidate that loops forever costs this, not the original's whole --timeout)."""
    return min(cap, max(REDUCE_FLOOR_S, REDUCE_FACTOR * slowest_s))
