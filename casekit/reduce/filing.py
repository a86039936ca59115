"""`--capture`: the reduced script filed as a case, its notes naming the original."""

from __future__ import annotations

from pathlib import Path

from casekit.capture import CaptureRequest, capture, provenance_of
from casekit.model import Case
from casekit.reduce.result import CaptureOptions, ReduceResult
from casekit.reduce.summary import site_text
from casekit.runners.interface import ProgressFn, Runner


def capture_reduced(
    result: ReduceResult, options: CaptureOptions, original: Path, runner: Runner, progress: ProgressFn
) -> Case:
    """File the reduced script as a case; its notes name the original (file, hash, size, provenance)."""
    script = result.out / result.script
    includes = [path for path in result.written if path != script]
    provenance = provenance_of(original)
    where = ""
    if provenance is not None:
        where = f" ({provenance.remote or provenance.repo} {provenance.path} at {(provenance.commit or '?')[:12]})"
    notes = (
        f"Reduced by casekit reduce from {result.script}{where}, sha256 {result.original_sha256[:16]}, "
        f"{result.lines_before} lines and {result.breaks_before} break(s), to {result.lines_after} lines on torch "
        f"{result.torch}; kept {site_text(result)}; {result.candidates} candidates in {result.seconds:.0f} s. "
        "A reduced repro may not show the break on other releases: it was reduced on this one."
    )
    request = CaptureRequest(
        script=script,
        title=options.title or f"{result.kept.gb_id or result.kept.category} in {result.script} (reduced)",
        case_id=options.case_id,
        tags=["reduced"],
        notes=notes,
        includes=sorted({result.out / path.relative_to(result.out).parts[0] for path in includes}),
    )
    return capture(request, runner, options.archive, progress)
