"""The Dynamo settings a target runs with (`--dynamo NAME=VALUE`), and how a target's label shows them.

Names are checked here for their shape only: which names a release has is known inside the target,
where the probe refuses the target in one line ("torch 2.5.1 lacks the Dynamo setting
torch._dynamo.config.nested_graph_breaks") before any script runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from casekit.errors import CasekitError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
MAX_VALUE_CHARS = 200  # a flag, a number or a stance name; 20,000 minus signs overflowed the parser
INTEGER = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|[0-9][0-9_]*)")
FLOAT = re.compile(r"[+-]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?")
QUOTED = re.compile(r"'[^'\\\n]*'|\"[^\"\\\n]*\"")
CONSTANTS = {"True": True, "False": False, "None": None}
PIN = re.compile(r"^(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]{0,99})==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63})$")


class SettingError(CasekitError):
    """A --dynamo or --package value that is not NAME=VALUE / NAME==VERSION."""


def dynamo_value(text: str) -> Any:
    """A setting's value from its text: True / False / None, a number, else the text itself (a stance name).

    Read by a small grammar of its own (ASCII digits, one sign), never by Python's parser: a value is
    at most MAX_VALUE_CHARS long, and a container ([...], (...), {...}) is refused."""
    if len(text) > MAX_VALUE_CHARS:
        raise SettingError(f"--dynamo value of {len(text)} characters: a setting takes at most {MAX_VALUE_CHARS}")
    if text in CONSTANTS:
        return CONSTANTS[text]
    if INTEGER.fullmatch(text):
        try:
            return int(text, 0)
        except ValueError:  # '1__0', '0x_'
            return text
    if FLOAT.fullmatch(text):
        try:
            return float(text)
        except ValueError:
            return text
    if QUOTED.fullmatch(text):
        return text[1:-1]
    if text[:1] in "[({":
        raise SettingError(f"--dynamo value {text[:40]!r}: give True, False, a number or a name")
    return text


def parse_dynamo(items: Iterable[str], flag: str = "--dynamo") -> tuple[tuple[str, str], ...]:
    """`NAME=VALUE` items as (name, value text) pairs, checked; a name given twice keeps the last value."""
    settings: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if name.startswith("torch._dynamo.config."):
            name = name.removeprefix("torch._dynamo.config.")
        if not sep or not NAME.match(name) or not value:
            raise SettingError(f"{flag} takes NAME=VALUE (a torch._dynamo.config name or 'stance'), not {item[:80]!r}")
        dynamo_value(value)
        settings[name] = value
    return tuple(settings.items())


def parse_pins(items: Iterable[str], flag: str = "--package") -> tuple[str, ...]:
    """`NAME==VERSION` items, checked; torch itself is chosen with --torch, not here."""
    pins: dict[str, str] = {}
    for item in items:
        match = PIN.match(item.strip())
        if not match:
            raise SettingError(f"{flag} takes NAME==VERSION (a library pin), not {item[:80]!r}")
        if match["dist"].lower() == "torch":
            raise SettingError(f"{flag} {item}: choose torch with --torch, not {flag}")
        pins[match["dist"].lower()] = item.strip()
    return tuple(pins.values())


def pin_name(pin: str) -> str:
    """The distribution a `name==version` pin names, normalized (PEP 503)."""
    return re.sub(r"[-_.]+", "-", pin.partition("==")[0]).lower()


def config_of(settings: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The settings as the probe request carries them (values parsed)."""
    return {name: dynamo_value(value) for name, value in settings}


def variant_suffix(dynamo: Sequence[tuple[str, str]], packages: Sequence[str]) -> str:
    """What a label adds for a target's own settings and pins: '+nested_graph_breaks=True+mylib==2.0'."""
    return "".join(f"+{name}={value}" for name, value in dynamo) + "".join(f"+{pin}" for pin in packages)
