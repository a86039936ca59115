"""The result run again by the runner itself: in a fresh probe (as replay runs it), or on another release."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from casekit.bundle import sha256_text
from casekit.classify import match_sites
from casekit.errors import CasekitError
from casekit.model import ScriptObservation, ScriptSource, ScriptStatus, Site, SiteClass
from casekit.observe.batch import observe_batch
from casekit.reduce.judge.oracle import Judgement, Oracle
from casekit.reduce.judge.probe import CandidateJob, CandidateProbe, Layout, included
from casekit.reduce.result import ReduceResult
from casekit.reduce.source.candidate import Candidate
from casekit.reduce.target import open_warm_session
from casekit.runners.interface import ProgressFn, Runner, ScriptEntry
from casekit.scrub import temp_prefix


def no_oracle() -> Oracle:
    """The original's own run is judged by `request.refuse_original`, not by an oracle."""
    return Oracle(ScriptObservation(ScriptStatus.OK), Site("", 0, "", "", "", ""), frozenset())


def confirm(
    best: Candidate, layout: Layout, oracle: Oracle, runner: Runner, timeout: float, backend: str, progress: ProgressFn
) -> tuple[Judgement, ScriptObservation | None]:
    """The result run by the runner itself (a fresh probe), judged again, and its run in its own lines."""
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix("reduce")))
    try:
        script = best.files[layout.script]
        assert script is not None
        path = folder / layout.script
        path.write_text(script.text, encoding="utf-8")
        reduced = tuple(
            included(n, r.text) for n, r in sorted(best.files.items()) if n != layout.script and r is not None
        )
        job = CandidateJob(
            id="reduced",
            script=path,
            backend=backend,
            timeout=timeout,
            includes=reduced + layout.fixed,
            eager_must_pass=False,
        )
        with runner.open_session(ScriptEntry.REDUCE_CONFIRM) as session:
            batch = session.run_probe([job], progress)
        source = ScriptSource(layout.script, sha256_text(script.text), script.text)
        observed = observe_batch(batch, job, source)
        judgement = oracle.judge(layout.placement_of(best).observation(observed))
        return judgement, observed
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_on_release(result: ReduceResult, runner: Runner, progress: ProgressFn) -> Judgement:
    """Whether the reduced files still show the kept break on another target (a second release):
    the original and the result run there side by side, the kept break found in the original's run by
    casekit's pairing, and the result judged against it by the reduction's own oracle."""
    if result.best is None or result.original_files is None or result.layout is None:
        raise CasekitError("check_on_release needs a finished reduction")
    runner.prepare(progress)
    layout = result.layout
    with open_warm_session(runner) as probe:
        lay_out = CandidateProbe(probe, layout, no_oracle(), max(result.timeout, 60.0), progress, result.backend)
        original, reduced = lay_out.observe([result.original_files, result.best])
    if original.status is not ScriptStatus.OK:
        return Judgement(False, f"the original on this release: {original.status.value}: {original.detail}"[:300])
    pairings, _, _ = match_sites([result.kept], original.sites)
    there = pairings[0] if pairings else None
    if there is None or there.observed is None or there.site_class is not SiteClass.PERSISTS:
        return Judgement(False, "the original does not show the kept break on this release")
    return Oracle(original, there.observed, result.user_files).judge(reduced)
