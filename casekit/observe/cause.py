"""Why a script did not get to run its compiled code, in one line, with what to do about it.

When a replay's eager baseline fails (an import error, a missing API, a library that refuses
the target's torch), nothing about its breaks was observed: the classifier marks the recorded
sites `unobserved` and the verdict names this cause. The one cause with a known remedy is a
pinned library whose own torch floor is above the target's torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from casekit.model import ScriptObservation

TORCH_FLOOR = re.compile(r"(?:PyTorch|torch)\s*(?:>=|≥|version\s*>=?)\s*(?P<floor>\d+(?:\.\d+)+)", re.IGNORECASE)
MISSING_MODULE = re.compile(r"No module named")
TARGET_TORCH = re.compile(r"torch[-=@ ]?(?P<version>\d+\.\d+(?:\.\d+)?)")

RequiresLookup = Callable[[str, str], list[str] | None]


@dataclass(frozen=True)
class NotRun:
    """A script that did not get to run its compiled code: the one-line cause, and the pinned library to blame.

    `pinned` names the library (pinned at the case's version) whose own torch floor is above the target's
    torch: the environment's doing, not the script's. None when no such library is to blame."""

    line: str  # "nothing ran: ...", as the notes and the reasons show it
    pinned: str | None = None


def installed_requires(dist: str, version: str) -> list[str] | None:
    """The requirements of `dist` as installed here, when the installed version is `version`."""
    try:
        if metadata.version(dist) != version:
            return None
        return metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return None


def torch_floor(requires: list[str]) -> str | None:
    """The lowest torch a distribution accepts, from its requirements (extras included)."""
    floors = []
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower() != "torch":
            continue
        floors += [spec.version for spec in requirement.specifier if spec.operator in (">=", ">", "~=", "==")]
    return floors[0] if floors else None


def target_torch(target: str) -> str | None:
    match = TARGET_TORCH.search(target)
    return match["version"] if match else None


def _below(version: str, floor: str) -> bool:
    try:
        return Version(version) < Version(floor)
    except InvalidVersion:
        return False


def not_run_cause(
    observation: ScriptObservation,
    packages: dict[str, str],
    target: str,
    requires: RequiresLookup = installed_requires,
) -> NotRun:
    """Why the script did not run on `target` in one line, and for a pinned library, what to do.

    The library is the pinned one the error names (or the only one pinned); its floor is the one
    the error states, else the one its installed metadata declares.
    """
    text = "\n".join(
        [observation.detail, observation.error.message if observation.error else "", observation.stdout_tail]
    )
    torch = target_torch(target) or observation.packages.get("torch")
    libraries = {d: v for d, v in sorted(packages.items()) if d.lower() != "torch"}
    named = [d for d in libraries if re.search(rf"\b{re.escape(d)}\b", text, re.IGNORECASE)]
    stated = TORCH_FLOOR.search(text)
    found: tuple[str, str] | None = None
    if MISSING_MODULE.search(text):  # not installed at all (--no-pin-packages): nothing to blame on a floor
        stated, named = None, []
    if stated and (named or len(libraries) == 1):
        found = (named or list(libraries))[0], stated["floor"]
    elif torch:
        for dist in named:  # the error names the library: its own metadata says which torch it accepts
            floor = torch_floor(requires(dist, libraries[dist]) or [])
            if floor and _below(torch, floor):
                found = dist, floor
                break
    if found is None:
        return NotRun(f"nothing ran: {observation.detail or observation.status.value}")
    dist, floor = found
    shown = torch or "the target's torch"
    return NotRun(
        f"nothing ran: {dist} {libraries[dist]} (pinned) requires torch>={floor} and refuses torch {shown}; "
        f"replay with --no-pin-packages, or pin a {dist} version that supports torch {shown}",
        pinned=dist,
    )
