"""How a run ends: the --fail-on level, the one exit-code policy, and the checks on numeric flags.

A leaf module (it imports only the model and the errors), so replay, merge and
bisect all decide their exit code the same way:

    0  nothing reached --fail-on
    1  a result reached --fail-on
    2  a usage or environment problem: a bad flag, an environment that could
       not run, an invalid bundle or results file (nothing to judge)
"""

from __future__ import annotations

import enum
import math

from casekit.errors import CasekitError
from casekit.model import Severity


class ExitCode(enum.IntEnum):
    """The process exit status of casekit's judging commands."""

    OK = 0
    FAILED = 1  # a result reached --fail-on
    PROBLEM = 2  # usage or environment: the run could not judge everything it was asked to


class FailOn(enum.StrEnum):
    """The severity at which a run fails (`--fail-on`); NEVER turns verdicts off."""

    ERROR = "error"
    WARN = "warn"
    INFO = "info"
    NEVER = "never"

    @classmethod
    def parse(cls, text: str | FailOn) -> FailOn:
        """'warn' -> FailOn.WARN; anything else is one clear error line."""
        try:
            return cls(text)
        except ValueError:
            raise CasekitError(f"--fail-on must be error, warn, info or never, not {text!r}") from None

    def reached_by(self, worst: Severity) -> bool:
        """Whether a result of severity `worst` fails the run."""
        if self is FailOn.NEVER:
            return False
        return worst.rank >= Severity(self.value).rank


def exit_code(worst: Severity, fail_on: FailOn | str, problems: int = 0) -> ExitCode:
    """The one exit rule for replay, merge and bisect.

    `problems` counts what kept the run from judging everything (failed
    environments, invalid inputs the user did not allow): any makes it 2,
    whatever the verdicts, because a CI job must not read "no regression"
    into cells that never ran.
    """
    if problems:
        return ExitCode.PROBLEM
    return ExitCode.FAILED if FailOn.parse(fail_on).reached_by(worst) else ExitCode.OK


def check_seconds(flag: str, value: float) -> float:
    """A timeout flag: finite and > 0 (nan/inf would disable it, 0 or less would hang or fail every run)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CasekitError(f"{flag} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise CasekitError(f"{flag} must be a finite number of seconds greater than 0, not {value!r}")
    return float(value)
