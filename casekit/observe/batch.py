"""From a runner's batch result to one observation per job."""

from __future__ import annotations

from casekit.model import ScriptObservation, ScriptSource
from casekit.observe.interpret import failed_observation, interpret
from casekit.runners.interface import ProbeBatchResult, ProbeJob


def observe_batch(batch: ProbeBatchResult, job: ProbeJob, source: ScriptSource) -> ScriptObservation:
    """The observation for one job of a batch (env_failed when the probe gave nothing)."""
    raw = batch.results.get(job.id)
    if raw is None:
        return failed_observation(batch.failed.get(job.id, "no result from the probe"))
    return interpret(raw, str(raw.get("script", job.script)), source.name, source.source)
