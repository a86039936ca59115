"""Help that teaches: plain, stable rendering with readable metavars, and `--version`.

Typer's rich help ate the `[default: ...]` notes (markup) and printed types as
`<list[str]>`; the app renders click's plain help instead (the same under NO_COLOR,
in CI logs and in golden files), and every parameter without an explicit metavar
gets a word a user can read: PATH, TEXT, SECONDS, N.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

from typer.core import TyperGroup

# annotation -> metavar; a repeatable option says so in its help text ("repeatable")
_METAVARS: dict[Any, str] = {Path: "PATH", str: "TEXT", float: "NUMBER", int: "N"}


def _metavar(param: Any) -> str | None:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or getattr(param, "is_flag", False):
        return None
    annotation = descriptor.annotation
    if getattr(descriptor, "is_list", False):
        annotation = next(iter(getattr(annotation, "__args__", ())), str)
    word = _METAVARS.get(annotation, "VALUE")
    if param.param_type_name == "argument":
        word = (param.name or word).upper()
        return word  # typer marks a repeatable argument with "..." itself
    if param.name == "timeout":
        return "SECONDS"
    return word


def readable_metavars(command: Any) -> None:
    """Give every parameter (of the command and its subcommands) a readable metavar."""
    for param in command.params:
        if param.metavar is None:
            param.metavar = _metavar(param)
        if param.param_type_name == "argument":  # the name says it; no "<list[str]>" beside it
            param.display_type_rich = lambda ctx: None  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        readable_metavars(sub)


class TeachingGroup(TyperGroup):
    """The casekit group: plain help with readable metavars (did-you-mean for commands is typer's)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        readable_metavars(self)


def casekit_version() -> str:
    """The installed casekit version (the source tree's when run from a checkout)."""
    try:
        return metadata.version("casekit")
    except metadata.PackageNotFoundError:  # pragma: no cover - a checkout without an install
        return "0+unknown"
