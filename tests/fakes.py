"""A fake runner at the Runner interface: it answers with probe results recorded on real torch.

tests/fixtures/probe/<release>/<script>.json are raw results of the real probe
(tests/fixtures/record_probe_fixtures.py) on torch 2.5.1 and 2.13.0. Serving them
back lets replay, rollback, shard and exit-code logic run in milliseconds; the
same paths run for real (subprocesses, real torch) in test_replay.py and
test_shard.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from casekit.errors import RunnerError
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn, Runner, TargetSpec
from casekit.runners.registry import label

PROBE_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "probe"
FIXTURE_SCRIPTS = Path(__file__).resolve().parent / "fixtures" / "scripts"
RELEASES = ("2.5.1", "2.13.0")


@cache
def _recorded(release: str, stem: str) -> dict[str, object] | None:
    path = PROBE_FIXTURES / release / f"{stem}.json"
    return json.loads(path.read_text()) if path.exists() else None


@dataclass
class Target:
    """How one fake target behaves: which release it serves, and what goes wrong there."""

    release: str
    prepare_error: str | None = None  # the environment cannot be built
    serve_as: dict[str, str] = field(default_factory=dict)  # script stem -> fixture stem (a script that changed)


class RecordedRunner(Runner):
    """Serves recorded probe results for the scripts it is given, by script file name."""

    name = "recorded"

    @classmethod
    def check_options(cls, options: object) -> None:
        """It stands in for whichever runner the spec names: that runner's keys are checked in its own tests."""

    def __init__(self, spec: TargetSpec, target: Target, log: list[tuple[str, ProbeJob]]) -> None:
        super().__init__(spec)
        self.target = target
        self.log = log

    def prepare(self, progress: ProgressFn) -> None:
        if self.target.prepare_error:
            raise RunnerError(self.target.prepare_error)

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        results: dict[str, dict[str, object]] = {}
        failed: dict[str, str] = {}
        for job in jobs:
            self.log.append((label(self.spec), job))
            stem = self.target.serve_as.get(job.script.stem, job.script.stem)
            raw = _recorded(self.target.release, stem)
            if raw is None:
                failed[job.id] = f"no recorded result for {stem} on {self.target.release}"
                continue
            served = copy.deepcopy(raw)
            runs = served["runs"]
            assert isinstance(runs, dict)
            # rollback is the compiled run with fullgraph=False: the recorded compiled run is that run
            modes = {mode: runs.get("compiled" if mode == "rollback" else mode) for mode in job.modes}
            served["runs"] = {mode: run for mode, run in modes.items() if run is not None}
            served["job"] = job.id
            results[job.id] = served
        return ProbeBatchResult(
            environment={"torch": self.target.release, "python": "3.11.7"}, results=results, failed=failed
        )

    def describe(self) -> dict[str, object]:
        return {"runner": self.spec.runner, "label": label(self.spec)}


def recorded_targets(targets: dict[str, Target]) -> tuple[list[TargetSpec], Callable[[TargetSpec], Runner], list]:
    """TargetSpecs named after each key, a runner factory serving them, and the log of jobs run."""
    log: list[tuple[str, ProbeJob]] = []
    specs = [TargetSpec(runner="python", python=name) for name in targets]
    by_label = {label(spec): targets[spec.python or ""] for spec in specs}

    def factory(spec: TargetSpec) -> Runner:
        return RecordedRunner(spec, by_label[label(spec)], log)

    return specs, factory, log
