"""The warm session a reduction runs its candidates in: the runner's, when it keeps a probe warm on this host.

A runner whose probe runs elsewhere (a container) gives a session per batch: a reduction of a few hundred
candidates would start as many containers, so it is refused with the way out.
"""

from __future__ import annotations

from collections.abc import Mapping

from casekit.errors import CasekitError
from casekit.runners.interface import ProbeScheduling, ProbeSession, Runner, ScriptEntry


def open_warm_session(
    runner: Runner, scheduling: ProbeScheduling | None = None, env: Mapping[str, str] | None = None
) -> ProbeSession:
    """The prepared runner's warm session for a reduction's candidates; CasekitError (one line) if it has none."""
    session = runner.open_session(ScriptEntry.REDUCE, scheduling=scheduling, env=env)
    if not session.warm:
        session.close()
        raise CasekitError(
            f"reduce runs its candidates in a warm probe on this host: {runner.display_of(runner.spec)} cannot; "
            "give --python PATH or --torch VERSION"
        )
    return session
