"""One exception family: the CLI turns any CasekitError into one clear line."""

from __future__ import annotations


class CasekitError(Exception):
    """Base of every error casekit reports to a user (exit code 2 at the CLI)."""

    exit_code = 2


class BundleError(CasekitError):
    """A bundle file is missing, malformed, or has a bad field."""

    def __init__(self, path: object, field: str | None, problem: str) -> None:
        where = f"{path}" + (f": field '{field}'" if field else "")
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.field = field


class BundleWriteError(CasekitError):
    """A bundle could not be written (disk full, read-only archive); the file on disk is as it was."""


class CaseIdError(CasekitError):
    """A case id that is not a plain slug (it could escape the archive)."""


class ScriptNameError(CasekitError):
    """A script name that is not one plain file name (it could write outside casekit's folders)."""


class CaseNotFound(CasekitError):
    """No case with that id in the archive."""


class ScriptError(CasekitError):
    """A script given to capture cannot be read."""


class EnvironmentFailed(CasekitError):
    """A target environment could not be built or started."""


class RunnerError(CasekitError):
    """A runner (python, venv, docker) failed outside the script under test."""


class DockerUnavailable(RunnerError):
    """The Docker engine cannot be reached."""


class BisectError(CasekitError):
    """A bisection cannot start or continue (ends agree, no candidates...)."""


class GitError(CasekitError):
    """A git repository operation failed."""


class SandboxUnavailable(RunnerError):
    """The host cannot sandbox the scripts (no bwrap, no user namespaces, not Linux) and no opt-out was given."""


class Stopped(KeyboardInterrupt):
    """casekit was told to stop (SIGINT, SIGTERM, SIGHUP): everything it started is killed on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
