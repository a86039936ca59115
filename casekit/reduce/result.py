"""What a reduction did, and how it ends early."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from casekit.archive.store import Archive
from casekit.errors import Stopped
from casekit.model import Site
from casekit.reduce.judge.oracle import Judgement
from casekit.reduce.judge.probe import Layout
from casekit.reduce.source.candidate import Candidate


@dataclass(frozen=True)
class CaptureOptions:
    """`--capture`: where to file the reduced script and how to name it."""

    archive: Archive
    case_id: str | None = None
    title: str | None = None


@dataclass
class ReduceResult:
    """What a reduction did: sizes, the break kept, the cost; `stopped` says why it ended early."""

    script: str
    out: Path
    torch: str
    kept: Site  # the break, as the original shows it
    kept_now: Site | None  # the same break as the result shows it (its lines)
    lines_before: int
    lines_after: int
    breaks_before: int
    breaks_after: int
    candidates: int  # candidates run in the probe
    cached: int  # candidates answered from an earlier run of the same text
    seconds: float
    written: list[Path]
    files_before: int
    files_after: int
    stopped: str | None = None  # "interrupted" | "time limit"
    confirmed: Judgement | None = None  # the result observed again in a fresh probe (None: not checked)
    refusals: dict[str, int] = field(default_factory=dict)
    original_sha256: str = ""
    improved: bool = False
    case_id: str | None = None  # the case --capture filed
    case_path: Path | None = None
    # what a later check on another release needs (`run.check_on_release`): both versions, laid out
    original_files: Candidate | None = field(default=None, repr=False)
    best: Candidate | None = field(default=None, repr=False)
    layout: Layout | None = field(default=None, repr=False)
    user_files: frozenset[str] = frozenset()
    backend: str = "eager"
    timeout: float = 300.0

    @property
    def per_second(self) -> float:
        return self.candidates / self.seconds if self.seconds > 0 else 0.0


class ReduceStopped(Stopped):
    """Ctrl-C (or SIGTERM) during a reduction: the best result so far is in the output folder."""

    def __init__(self, signum: int, result: ReduceResult) -> None:
        super().__init__(signum)
        self.result = result
