"""Which runner provides a target: one line per runner."""

from __future__ import annotations

from casekit.errors import RunnerError
from casekit.runners.interface import Runner, TargetSpec

RUNNER_NAMES = ("python", "venv", "docker")


def make_runner(spec: TargetSpec) -> Runner:
    """The runner named by `spec.runner`, ready for prepare()."""
    if spec.runner == "python":
        from casekit.runners.python import PythonRunner

        return PythonRunner(spec)
    if spec.runner == "venv":
        from casekit.runners.venv import VenvRunner

        return VenvRunner(spec)
    if spec.runner == "docker":
        # imported only when asked for: it pulls in the Docker SDK
        from casekit.runners.docker.runner import DockerRunner

        return DockerRunner(spec)
    raise RunnerError(f"unknown runner {spec.runner!r} (choose one of: {', '.join(RUNNER_NAMES)})")
