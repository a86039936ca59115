"""From a runner's batch result to one observation per job: interpreted, structured inputs added, paths scrubbed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from casekit.model import CallInfo, ScriptObservation, ScriptSource, TensorInput
from casekit.observe.interpret import failed_observation, interpret
from casekit.observe.probe_output import ProbeOutputError, checked_result
from casekit.runners.interface import ProbeBatchResult, ProbeJob
from casekit.scrub import Replacement, Scrubber, machine_folders


def batch_scrubber(script_in_batch: str) -> Scrubber:
    """The scrubber for one job: its batch script folder drops out, the batch folder and machine become placeholders."""
    script_dir = str(PurePosixPath(script_in_batch).parent)
    batch_dir = str(PurePosixPath(script_dir).parent.parent)  # <batch>/scripts/<job id>/<script>
    return Scrubber([Replacement(script_dir, ""), Replacement(batch_dir, "<batch>"), *machine_folders()])


def observe_batch(batch: ProbeBatchResult, job: ProbeJob, source: ScriptSource) -> ScriptObservation:
    """The observation for one job of a batch (env_failed when the probe gave nothing), machine paths scrubbed."""
    raw = batch.results.get(job.id)
    if raw is None:
        return Scrubber(machine_folders()).walk(
            failed_observation(batch.failed.get(job.id, "no result from the probe"))
        )
    try:
        raw = checked_result(raw)
    except ProbeOutputError as error:  # a result the probe's schema does not describe: nothing of it is used
        return Scrubber(machine_folders()).walk(failed_observation(f"the probe's result is unusable: {error}"))
    script_in_batch = str(raw.get("script", job.script))
    observation = interpret(raw, script_in_batch, source.name, source.source)
    add_structured_inputs(observation.calls, raw)
    return batch_scrubber(script_in_batch).walk(observation)


def add_structured_inputs(calls: list[CallInfo], raw: Mapping[str, Any]) -> None:
    """Fill each call's tensor fields from the probe's compiled-run records (beside the compact text)."""
    runs = raw.get("runs") or {}
    compiled = runs.get("compiled") or {} if isinstance(runs, dict) else {}
    by_index = {c.get("index"): c for c in compiled.get("calls", []) if isinstance(c, dict)}
    for call in calls:
        record = by_index.get(call.index) or {}
        tensors: list[TensorInput] = []
        for position, value in enumerate(record.get("args", [])):
            _collect_tensors(value, str(position), tensors)
        for name, value in (record.get("kwargs") or {}).items():
            _collect_tensors(value, f"kw:{name}", tensors)
        call.tensors = tensors


def _collect_tensors(value: Any, position: str, out: list[TensorInput]) -> None:
    if not isinstance(value, dict):
        return
    if value.get("kind") == "tensor":
        out.append(
            TensorInput(
                position=position,
                dtype=str(value.get("dtype", "?")),
                shape=[int(d) for d in value.get("shape", [])],
                device=str(value.get("device", "?")),
                dynamic_dims=[int(d) for d in value.get("dynamic_dims", [])],
                strides=[int(d) for d in value.get("strides", [])],
                contiguous=value.get("contiguous"),
                requires_grad=bool(value.get("requires_grad", False)),
            )
        )
        return
    items = value.get("items")
    if isinstance(items, list):
        for i, item in enumerate(items):
            _collect_tensors(item, f"{position}.{i}", out)
    elif isinstance(items, dict):
        for key, item in items.items():
            _collect_tensors(item, f"{position}.{key}", out)
