"""The interpreter, environment and sandbox a prepared runner runs its probe with: what the warm probe needs.

Only the host runners can lend their interpreter to a warm probe (a docker
target runs its probe in a container). When the runners carry their own
capabilities (issue 19), this belongs to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from casekit.errors import CasekitError
from casekit.runners.interface import Runner
from casekit.runners.sandbox import Sandbox


@dataclass(frozen=True)
class WarmTarget:
    python: str
    env: Mapping[str, str] | None
    sandbox: Sandbox


def warm_target(runner: Runner) -> WarmTarget:
    """The prepared runner's interpreter, the environment it gives the probe and its sandbox."""
    from casekit.runners.python import PythonRunner
    from casekit.runners.venv import VenvRunner

    if isinstance(runner, PythonRunner):
        return WarmTarget(runner.python, None, runner.sandbox)
    if isinstance(runner, VenvRunner) and runner.env is not None:
        from casekit.runners.venv.install import ISOLATING_ENV

        return WarmTarget(str(runner.env.python_executable), ISOLATING_ENV, Sandbox.from_options(runner.spec.options))
    raise CasekitError(
        f"reduce runs its candidates in a warm probe on this host: the {runner.name} runner cannot; "
        "give --python PATH or --torch VERSION"
    )
