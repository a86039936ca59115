"""The docker runner: replay images (`images`) and the sandboxed container that runs the probe (`runner`)."""

from casekit.runners.docker.runner import RUN_LABEL, DockerRunner, default_transfer

__all__ = ["RUN_LABEL", "DockerRunner", "default_transfer"]
