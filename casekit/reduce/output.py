"""Where the result goes: the output folder, always holding the best candidate so far, and the progress."""

from __future__ import annotations

import time
from pathlib import Path, PurePosixPath

from casekit.errors import CasekitError
from casekit.fsutil import write_atomic
from casekit.includes import file_bytes
from casekit.model import IncludedFile
from casekit.reduce.source.candidate import Candidate
from casekit.runners.interface import ProgressFn


class Output:
    """The output folder: the best candidate so far, always complete (each file written atomically)."""

    def __init__(self, out: Path, fixed: tuple[IncludedFile, ...]) -> None:
        self.out = out
        self.written: dict[str, Path] = {}
        for item in fixed:  # data files the reduced script reads: beside it, as they were
            self._write(item.path, file_bytes(item))

    def _write(self, name: str, data: str | bytes) -> Path:
        target = self.out.joinpath(*PurePosixPath(name).parts)
        try:
            write_atomic(target, data)
        except OSError as error:
            raise CasekitError(f"--out {self.out}: cannot write {name}: {error.strerror or error}") from None
        self.written[name] = target
        return target

    def save(self, files: dict[str, str | None]) -> None:
        for name, text in files.items():
            if text is None:
                path = self.written.pop(name, None)
                if path is not None:
                    path.unlink(missing_ok=True)
            else:
                self._write(name, text)


class Best:
    """The best candidate so far, written to the output on every improvement, and the progress shown."""

    REPORT_EVERY_S = 10.0

    def __init__(self, best: Candidate, before: int, output: Output, progress: ProgressFn, started: float) -> None:
        self.best, self.before, self.output, self.progress = best, before, output, progress
        self.started = started
        self.improved = False
        self._said = started
        self._phase = ""

    def phase(self, what: str) -> None:
        self._phase = what
        self.progress(f"reducing {what}: {self.best.code_lines()} lines")

    def keep(self, candidate: Candidate) -> None:
        """A candidate the oracle kept: the pipeline's best so far."""
        self.best = candidate
        self.improved = True
        self.output.save({n: (r.text if r is not None else None) for n, r in candidate.files.items()})

    def tick(self, run: int) -> None:
        now = time.monotonic()
        if now - self._said >= self.REPORT_EVERY_S:
            self._said = now
            rate = run / max(now - self.started, 1e-9)
            self.progress(
                f"{self._phase}: {run} candidates ({rate:.1f}/s), {self.before} -> {self.best.code_lines()} lines"
            )
