"""The interpreter, environment and sandbox a prepared runner runs its probe with: what the warm probe needs.

The runner says it (`Runner.host_interpreter`): a runner whose probe runs
elsewhere (a container) cannot lend an interpreter to a warm probe here.
"""

from __future__ import annotations

from casekit.errors import CasekitError
from casekit.runners.interface import HostInterpreter, Runner


def warm_target(runner: Runner) -> HostInterpreter:
    """The prepared runner's interpreter, the environment it gives the probe and its sandbox."""
    found = runner.host_interpreter()
    if found is None:
        raise CasekitError(
            f"reduce runs its candidates in a warm probe on this host: {runner.display_of(runner.spec)} cannot; "
            "give --python PATH or --torch VERSION"
        )
    return found
