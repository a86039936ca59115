"""The `casekit.probe/1` output, read once: the one reader of what the probe reports.

The probe (casekit/probe.py) runs inside the target and writes, per job, a result of every run of one
script, and per target an environment record (torch, its Dynamo settings, the machine). Both come from a
process that ran someone else's script, so both are untrusted: a result is checked against the JSON
Schema that ships in the package (data/probe-1.schema.json), and an environment keeps only the fields
whose type is the one a bundle records (model.RecordedEnvironment). Everything outside `observe/` reads
these typed values, never the raw JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from casekit.bundle import check_environment
from casekit.errors import BundleError, CasekitError

SCHEMA_FILE = "probe-1.schema.json"


class ProbeOutputError(CasekitError):
    """A probe result that the casekit.probe/1 schema does not describe."""


@cache
def probe_schema() -> dict[str, Any]:
    """The casekit.probe/1 JSON Schema, as shipped in the package."""
    schema: dict[str, Any] = json.loads(resources.files("casekit.data").joinpath(SCHEMA_FILE).read_text())
    return schema


@cache
def _validator() -> Any:
    import jsonschema  # imported on use: the commands that read no probe output never pay for it

    return jsonschema.Draft202012Validator(probe_schema())


def checked_result(raw: object) -> dict[str, Any]:
    """A probe result the schema describes (the same dict), or ProbeOutputError naming the first bad field."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(raw))
    if error is not None:
        where = ".".join(str(part) for part in error.absolute_path) or "the result"
        raise ProbeOutputError(f"probe result: {where}: {error.message[:200]}")
    assert isinstance(raw, dict)
    return raw


def run_as_compiled(result: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """The result with the run of `mode` (a rollback run: compiled with fullgraph=False forced) in the compiled
    run's place, and the eager run beside it, so it reads as one compiled observation."""
    runs = checked_result(dict(result))["runs"]
    return {**result, "runs": {"eager": runs.get("eager"), "compiled": runs.get(mode)}}


@dataclass(frozen=True)
class TargetEnvironment:
    """What a target reported about itself, typed: every field whose value has the type a bundle records
    (a field of another type is dropped and named in `dropped`, never passed on)."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()

    @property
    def torch(self) -> str | None:
        """The torch version the probe imported ("2.5.1+cu124"), or None when it did not say."""
        return self._text("torch")

    @property
    def torch_git(self) -> str | None:
        return self._text("torch_git")

    @property
    def torch_cuda(self) -> str | None:
        return self._text("torch_cuda")

    @property
    def python(self) -> str | None:
        return self._text("python")

    @property
    def sandbox(self) -> str | None:
        return self._text("sandbox")

    @property
    def dynamo_settings(self) -> dict[str, dict[str, Any]]:
        """name -> {"value", "default", "set"?, "alias_of"?}: the shape-changing Dynamo settings of the release."""
        settings = self.fields.get("dynamo_settings")
        return dict(settings) if isinstance(settings, Mapping) else {}

    def _text(self, name: str) -> str | None:
        value = self.fields.get(name)
        return value if isinstance(value, str) else None


def read_environment(environment: Mapping[str, Any]) -> TargetEnvironment:
    """A target's environment record (the probe's, with the runner's description beside it), typed."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in environment.items():
        if not isinstance(key, str):
            continue
        try:
            check_environment({key: value}, "the target's environment")
        except BundleError:
            dropped.append(key)
            continue
        kept[key] = value
    return TargetEnvironment(kept, tuple(dropped))
