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

# What torch says when a script asks for a GPU the interpreter cannot reach: a CPU build ("Torch not
# compiled with CUDA enabled"), a CUDA build with no driver or no device, a checkpoint saved on a GPU.
NO_CUDA = re.compile(
    r"not compiled with CUDA enabled|no NVIDIA driver|No CUDA GPUs are available|no CUDA-capable device"
    r"|CUDA driver initialization failed|torch\.cuda\.is_available\(\) is False"
    r"|Cannot access accelerator device when none is available",
    re.IGNORECASE,
)
NO_CUDA_ADVICE = (
    "this interpreter has no CUDA: use a GPU target (--python with a CUDA build of torch on a GPU host, "
    "or --runner docker --cuda cuXXX --allow gpus=all)"
)

RequiresLookup = Callable[[str, str], list[str] | None]


def failure_text(observation: ScriptObservation) -> str:
    """Everything a failed run said: its detail, its error, the tail of its output."""
    return "\n".join(
        [observation.detail, observation.error.message if observation.error else "", observation.stdout_tail]
    )


def needs_cuda(observation: ScriptObservation) -> bool:
    """Whether the run failed for want of a GPU (read from torch's own error text)."""
    return bool(NO_CUDA.search(failure_text(observation)))


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
    text = failure_text(observation)
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
        hint = f"; {NO_CUDA_ADVICE}" if NO_CUDA.search(text) else ""
        return NotRun(f"nothing ran: {observation.detail or observation.status.value}{hint}")
    dist, floor = found
    shown = torch or "the target's torch"
    return NotRun(
        f"nothing ran: {dist} {libraries[dist]} (pinned) requires torch>={floor} and refuses torch {shown}; "
        f"replay with --no-pin-packages, or pin a {dist} version that supports torch {shown}",
        pinned=dist,
    )
