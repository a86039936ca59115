"""The installer's own configuration, where it refuses an env build: constraints set outside casekit.

pip reads constraint files from PIP_CONSTRAINT and from `constraint = ...` in its config files (the
global /etc/xdg/pip/pip.conf and /etc/pip.conf, the user's, PIP_CONFIG_FILE's); uv from UV_CONSTRAINT
and `constraint-dependencies` in its uv.toml files. A build they refuse says only what pip says ("The
user requested (constraint) torch<=2.14.1"); `configured_cause` names where that constraint came from,
in one clause, so the person can lift it there.
"""

from __future__ import annotations

import configparser
import os
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

MAX_CONFIG_BYTES = 1 << 20  # a host's config or constraint file; read no further


@dataclass(frozen=True)
class Constraint:
    """One requirement the installer's configuration adds (`torch<=2.14.1`), and where it is set."""

    requirement: str
    where: str  # "/etc/xdg/pip/constraints.txt, named by `constraint` in /etc/xdg/pip/pip.conf"


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_CONFIG_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _requirement_lines(text: str) -> Iterator[str]:
    """The requirement lines of a constraints file (no comments, no options such as `-c other.txt`)."""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            yield line


def _from_files(paths: str, named_by: str) -> list[Constraint]:
    found = []
    for path in paths.split():
        text = _read(Path(path))
        if text is not None:
            found += [Constraint(line, f"{path}, named by {named_by}") for line in _requirement_lines(text)]
    return found


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's config files in the order it reads them (global, user, PIP_CONFIG_FILE); none when
    PIP_CONFIG_FILE is os.devnull (pip then reads none)."""
    named = env.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in dirs if d] + [Path("/etc/pip.conf")]
    config_home = Path(env.get("XDG_CONFIG_HOME") or _home(env) / ".config")
    files += [_home(env) / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    return files + ([Path(named)] if named else [])


def pip_constraints(env: Mapping[str, str]) -> list[Constraint]:
    """Every constraint pip's configuration adds to an install run with `env`."""
    found = _from_files(env.get("PIP_CONSTRAINT", ""), "PIP_CONSTRAINT")
    for conf in pip_config_files(env):
        text = _read(conf)
        if text is None:
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(text)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_option(section, "constraint"):
                found += _from_files(parser.get(section, "constraint"), f"`constraint` in {conf} [{section}]")
    return found


def uv_constraints(env: Mapping[str, str]) -> list[Constraint]:
    """Every constraint uv's configuration adds to `uv pip install` run with `env` (from a folder with no
    project: casekit runs it in its cache)."""
    found = _from_files(env.get("UV_CONSTRAINT", ""), "UV_CONSTRAINT")
    if env.get("UV_NO_CONFIG"):
        return found
    if env.get("UV_CONFIG_FILE"):
        files = [Path(env["UV_CONFIG_FILE"])]
    else:
        config_home = Path(env.get("XDG_CONFIG_HOME") or _home(env) / ".config")
        dirs = [d for d in (env.get("XDG_CONFIG_DIRS") or "").split(":") if d]
        files = [config_home / "uv" / "uv.toml", *(Path(d) / "uv" / "uv.toml" for d in dirs), Path("/etc/uv/uv.toml")]
    for conf in files:
        text = _read(conf)
        try:
            data = tomllib.loads(text) if text is not None else {}
        except tomllib.TOMLDecodeError:
            continue
        for line in data.get("constraint-dependencies") or []:
            if isinstance(line, str):
                found.append(Constraint(line, f"`constraint-dependencies` in {conf}"))
    return found


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def _refuses(constraint: str, asked: Sequence[str]) -> bool:
    """Whether `constraint` can refuse what the build asks for: it excludes an exact pin asked of the same
    package, or the package is asked for with no exact pin (it may exclude every version there is)."""
    try:
        limit = Requirement(constraint)
    except InvalidRequirement:
        return False
    if not limit.specifier:
        return False  # a bare name constrains nothing
    pins, named = [], False
    for text in asked:
        try:
            wanted = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(wanted.name) == canonicalize_name(limit.name):
            named = True
            pins += [s.version for s in wanted.specifier if s.operator in ("==", "===") and "*" not in s.version]
    if pins:
        return any(not limit.specifier.contains(pin, prereleases=True) for pin in pins)
    return named


def configured_cause(installer: str, output: str, env: Mapping[str, str], asked: Sequence[str] = ()) -> str | None:
    """One clause naming the configuration behind a refused install: each configured constraint the
    installer's output quotes ("The user requested (constraint) torch<=2.14.1") that excludes what the
    build asks for (`asked`: its requirements), with where it is set; None when there is none (the
    refusal is not the configuration's)."""
    constraints = pip_constraints(env) if installer == "pip" else uv_constraints(env)
    said = _squeezed(output)
    quoted: dict[str, list[str]] = {}
    for constraint in constraints:
        if _squeezed(constraint.requirement) in said and _refuses(constraint.requirement, asked):
            quoted.setdefault(constraint.requirement, []).append(constraint.where)
    if not quoted:
        return None
    named = "; ".join(f"{requirement} from {' and '.join(wheres)}" for requirement, wheres in quoted.items())
    return f"refused by {installer}'s own configuration, not by casekit: {named} (lift it there to build this env)"
