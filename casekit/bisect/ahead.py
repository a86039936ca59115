"""Building release environments ahead of need, in one background thread, while the current release runs.

The shared search tells `BuildAhead.want()` which candidates its next rounds
will likely need (both halves of the next split); at most `limit` of them are
built, one at a time, and only while the disk the runner builds on keeps
`min_free` bytes free (when the runner can tell: a remote engine's it cannot). A
candidate no longer wanted is dropped before it starts. A build in progress is
never interrupted: the runners build atomically (a temporary folder renamed
when complete, the rest removed by the next build under the same lock), so
`close()` lets it finish (an env a later bisection reuses) and starts no other.
A build that fails is left to the search, which meets the same failure when it
needs that candidate and calls it unknown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from casekit.runners import registry
from casekit.runners.interface import ProgressFn, Runner, TargetSpec

Prepare = Callable[[str], None]
"""Make one candidate's environment ready (the runner's `prepare`); raises when it cannot be built."""

GIB = 1 << 30


@dataclass
class AheadStats:
    """What building ahead did: builds finished (and their seconds), failed, skipped for disk space."""

    built: list[tuple[str, float]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped_for_disk: list[str] = field(default_factory=list)


class BuildAhead:
    """One background builder with a short, replaceable wish list."""

    def __init__(
        self,
        prepare: Prepare,
        *,
        limit: int = 2,
        free_bytes: Callable[[], int | None] | None = None,  # None, or a None answer: no check
        min_free: int = 5 * GIB,
        progress: ProgressFn | None = None,
    ) -> None:
        self._prepare = prepare
        self.limit = max(0, limit)
        self._free_bytes = free_bytes
        self.min_free = min_free
        self._progress = progress or (lambda message: None)
        self._wanted: list[str] = []
        self._started: set[str] = set()  # built, building or failed: never twice
        self._building: str | None = None
        self._closed = False
        self._lock = threading.Condition()
        self.stats = AheadStats()
        self._thread = threading.Thread(target=self._work, name="casekit-build-ahead", daemon=True)
        self._thread.start()

    def want(self, candidates: list[str]) -> None:
        """Replace the wish list (most useful first); what is no longer on it will not be started."""
        with self._lock:
            self._wanted = [c for c in candidates if c not in self._started][: self.limit]
            self._lock.notify_all()

    def claim(self, candidate: str) -> None:
        """The search is about to need this candidate itself: never start it here."""
        with self._lock:
            self._started.add(candidate)
            self._wanted = [c for c in self._wanted if c != candidate]

    def building(self) -> str | None:
        with self._lock:
            return self._building

    def close(self, *, wait: bool = True) -> None:
        """Start nothing more; with `wait`, let the build in progress finish (it is never cut in half)."""
        with self._lock:
            self._closed = True
            self._wanted = []
            self._lock.notify_all()
        if wait:
            self._thread.join()

    def __enter__(self) -> BuildAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next(self) -> str | None:
        with self._lock:
            while not self._closed and not self._wanted:
                self._lock.wait()
            if self._closed:
                return None
            candidate = self._wanted.pop(0)
            self._started.add(candidate)
            self._building = candidate
            return candidate

    def _work(self) -> None:
        while (candidate := self._next()) is not None:
            try:
                free = self._free_bytes() if self._free_bytes is not None else None
                if free is not None and free < self.min_free:
                    self.stats.skipped_for_disk.append(candidate)
                    self._progress(f"not building {candidate} ahead: under {self.min_free / GIB:.0f} GiB free")
                    continue
                started = time.monotonic()
                self._progress(f"preparing {candidate} ahead of need (built unless cached)")
                try:
                    self._prepare(candidate)
                except Exception as error:  # the search meets it again when it needs this candidate
                    self.stats.failed.append(candidate)
                    self._progress(f"building {candidate} ahead failed: {error}")
                    continue
                seconds = time.monotonic() - started
                self.stats.built.append((candidate, seconds))
                self._progress(f"{candidate} ready ahead of need ({seconds:.1f} s)")
            finally:
                with self._lock:
                    self._building = None


@dataclass(frozen=True)
class Ahead:
    """How far to build ahead: at most `limit` envs (0: never), only with `min_free_gib` free where they are built."""

    limit: int = 2
    min_free_gib: float = 5.0
    ends_together: bool = True  # several cases: probe the bad end beside the good end (every case needs both)


def release_builder(
    runner: str,
    spec: Callable[[str], TargetSpec],
    make_runner: Callable[[TargetSpec], Runner],
    ahead: Ahead,
    progress: ProgressFn,
) -> BuildAhead | None:
    """A background builder for a runner that builds its environments; none for one that does not."""
    kind = registry.runner_class(runner)
    if not kind.builds_envs or ahead.limit <= 0:
        return None

    def prepare(version: str) -> None:
        make_runner(spec(version)).prepare(lambda message: None)

    return BuildAhead(
        prepare,
        limit=ahead.limit,
        free_bytes=kind.free_build_bytes,
        min_free=int(ahead.min_free_gib * GIB),
        progress=lambda message: progress(f"[ahead] {message}"),
    )
