"""One scrubber for every text a bundle keeps: no absolute path of the capturing machine.

A bundle is attached to issues and replayed elsewhere, so the batch folder, the
home folder and the interpreter's prefix become stable placeholders. Paths also
appear *cut on the left*: torch's `shorten_filename` strips
`len(commonpath([file, torch_root])) + 1` characters, so a script under /tmp
shows as `mp/casekit-.../repro.py` when the common path is only `/`. Any
left-truncated tail of a known folder is therefore replaced as well.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import site
import sys
from collections.abc import Iterable
from typing import Any

# Where a path token starts: the start of the text or a delimiter.
_TOKEN_START = r"(?:^|(?<=[\s\"'`(\[{<#=:,;]))"
# The temporary folders casekit makes itself (mkdtemp(prefix=temp_prefix(kind))): only these are batch folders.
TEMP_FOLDER_KINDS = ("batch", "replay", "warm", "session", "stage", "bisect", "query", "docker", "build", "reduce")
# A leftover one, whole or cut on the left (`mp/casekit-batch-...`); never a folder that merely starts with
# "casekit-" (a user's `~/envs/casekit-nightly`), and never the text before a path (`python:` stays).
_BATCH_DIR = re.compile(
    _TOKEN_START
    + r"(?:[^\s\"'`:]*/)?casekit-(?:"
    + "|".join(TEMP_FOLDER_KINDS)
    + r")-[A-Za-z0-9_-]*[A-Za-z0-9_](?![A-Za-z0-9_.-])"
)
# Absolute paths no bundle should hold, whatever machine captured it (the test greps for these).
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|root|home|work|Users|private|var/folders)/[^\s\"']+")
_MIN_TAIL = 6  # shorter tails ("/a", "ot/") are too likely to be ordinary text


def temp_prefix(kind: str) -> str:
    """The mkdtemp prefix of one of casekit's own temporary folders (what the scrubber knows as a batch)."""
    assert kind in TEMP_FOLDER_KINDS, kind
    return f"casekit-{kind}-"


@dataclasses.dataclass(frozen=True)
class Replacement:
    folder: str  # absolute, without a trailing slash
    placeholder: str  # "" drops the folder (the script's own folder: files are named as beside it)


class Scrubber:
    """Replaces known machine folders (and their left-truncated tails) by placeholders."""

    def __init__(self, replacements: Iterable[Replacement]) -> None:
        # a folder given with its trailing separator is the same folder: its left-cut tails are found by its name
        unique = {
            r.folder.rstrip("/"): Replacement(r.folder.rstrip("/"), r.placeholder)
            for r in replacements
            if len(r.folder.rstrip("/")) > 1
        }
        # longest first: a script folder inside the batch folder wins over the batch folder
        self.replacements = sorted(unique.values(), key=lambda r: -len(r.folder))
        self._truncated = [(r, _truncated_pattern(r.folder)) for r in self.replacements]

    def text(self, value: str) -> str:
        """`value` with every known machine folder replaced by its placeholder."""
        if not value:
            return value
        for replacement in self.replacements:
            value = value.replace(replacement.folder + "/", _joined(replacement.placeholder))
            value = value.replace(replacement.folder, replacement.placeholder or ".")
        for replacement, pattern in self._truncated:
            value = pattern.sub(lambda m, r=replacement: _replace_tail(m, r), value)  # type: ignore[misc]
        return without_addresses(_BATCH_DIR.sub("<batch>", value))  # an address is as local as a path

    def walk(self, value: Any) -> Any:
        """Scrub every string inside dataclasses (in place; frozen ones are copied), dicts and lists."""
        if isinstance(value, enum.Enum):  # str-valued enums are names, not text
            return value
        if isinstance(value, str):
            return self.text(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {}
            for fld in dataclasses.fields(value):
                current = getattr(value, fld.name)
                if isinstance(current, (str, list, dict)) or dataclasses.is_dataclass(current):
                    changes[fld.name] = self.walk(current)
            if value.__dataclass_params__.frozen:  # type: ignore[attr-defined]
                return dataclasses.replace(value, **changes)
            for name, new in changes.items():
                setattr(value, name, new)
            return value
        if isinstance(value, list):
            return [self.walk(item) for item in value]
        if isinstance(value, dict):
            return {key: self.walk(item) for key, item in value.items()}
        return value


def _joined(placeholder: str) -> str:
    return placeholder + "/" if placeholder else ""


def _truncated_pattern(folder: str) -> re.Pattern[str]:
    last = folder.rsplit("/", 1)[-1]
    return re.compile(_TOKEN_START + r"(?P<head>[^\s\"'`]*?)" + re.escape(last) + r"(?P<sep>/|(?=[\s\"'`),:\]]|$))")


def _replace_tail(match: re.Match[str], replacement: Replacement) -> str:
    last = replacement.folder.rsplit("/", 1)[-1]
    tail = match["head"] + last
    if len(tail) >= _MIN_TAIL and replacement.folder.endswith(tail) and "/" in tail:
        return _joined(replacement.placeholder) if match["sep"] else (replacement.placeholder or ".")
    return match.group(0)


def machine_folders(extra: Iterable[Replacement] = ()) -> list[Replacement]:
    """The folders of this machine a bundle must not name: interpreter prefix, site-packages, home."""
    found = list(extra)
    for folder in _site_packages():
        found.append(Replacement(folder, "<site-packages>"))
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        found.append(Replacement(prefix, "<python>"))
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        found.append(Replacement(home, "~"))
    return found


def interpreter_prefix(executable: str) -> str | None:
    """The prefix of a target interpreter (`/x/venv` for `/x/venv/bin/python`), when it is a path."""
    if not executable or not os.path.isabs(executable):
        return None
    parent = os.path.dirname(os.path.dirname(executable))
    return parent if parent not in ("/", "/usr") else None


def _site_packages() -> list[str]:
    folders: list[str] = []
    try:
        folders.extend(site.getsitepackages())
    except AttributeError:  # some virtualenvs' site module
        pass
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user, str):
        folders.append(user)
    return folders


# An absolute path in a text: after a space, a quote, a bracket, '=' or ':' ("python:/x/y", "in /x/y"),
# never the '//' of a URL nor a relative path's inner slash.
_ABSOLUTE_PATH = re.compile(r"(?:(?<=^)|(?<=[\s\"'`(\[{<=:,]))/(?!/)[^\s\"'`,;()\[\]{}<>]+")
_KEPT_PARTS = 3  # what names an env, an interpreter or a script: `nightly/bin/python`, `case/pre/repro.py`


def portable_paths(text: str, home: str | None = None) -> str:
    """`text` with each absolute path as a label names it: under the home folder from `~`
    (`~/envs/nightly/bin/python`), elsewhere by its last three parts when it has more
    (`…/torch-2.13.0-py3.11-2fb6f524/bin/python`): what tells it apart, not this machine's folders."""
    home = (home if home is not None else os.path.expanduser("~")).rstrip("/")

    def portable(match: re.Match[str]) -> str:
        path = match.group(0)
        if len(home) > 1 and (path == home or path.startswith(home + "/")):
            return "~" + path[len(home) :]
        parts = [part for part in path.split("/") if part]
        return "…/" + "/".join(parts[-_KEPT_PARTS:]) if len(parts) > _KEPT_PARTS else path

    return _ABSOLUTE_PATH.sub(portable, text)


def machine_paths_in(text: str) -> list[str]:
    """Absolute machine paths found in `text` (what a portable bundle must not contain)."""
    home = os.path.expanduser("~")
    found = MACHINE_PATH.findall(text)
    for folder in {sys.prefix, sys.base_prefix, home}:
        if len(folder) > 1 and folder in text:
            found.append(folder)
    return found


# A repr's memory address (`<function f at 0x7f70d861b100>`) and an object id in a guard
# (`___check_obj_id(G['datetime'].now, 140122642294608)`): they differ on every run and mean nothing to a
# reader. A bare hex number stays: in a script's source line it is a constant (`mask = 0xFFFFFFFF`).
_REPR_ADDRESS = re.compile(r"(<[^<>]*?) at 0x[0-9a-fA-F]+>")
_GUARD_ID = re.compile(r"(___check_(?:obj|type)_id\([^()]*?, )\d{6,}\)")
_OPENERS, _CLOSERS = "([{<", ")]}>"
_WORD_BACKOFF = 16


def without_addresses(text: str) -> str:
    """`text` without memory addresses and object ids (a repr keeps its name: `<function f>`)."""
    if not text or ("0x" not in text and "_id(" not in text):
        return text
    text = _REPR_ADDRESS.sub(r"\1>", text)
    return _GUARD_ID.sub(r"\1<id>)", text)


def shorten(text: str, limit: int) -> str:
    """One line of at most `limit` characters, cut at a word, never inside brackets or quotes it opened:
    `builtin: repr [<class ...` becomes `builtin: repr …`, not a bracket left open."""
    value = " ".join(without_addresses(text).split())
    if len(value) <= limit:
        return value
    cut = value[: max(1, limit - 1)]
    if " " in cut[-_WORD_BACKOFF:]:  # at a word when one ends near the cut; a long path is cut inside
        cut = cut[: cut.rindex(" ")]
    start = _first_unclosed(cut)
    cut = cut[1:] if start == 0 else cut[:start]  # a text that opens at once loses that opener instead
    return cut.rstrip(" ,;:.-(") + "…"


def _first_unclosed(text: str) -> int:
    """Where the earliest bracket or quote that `text` leaves open starts (len(text) when none is)."""
    stack: list[tuple[str, int]] = []
    for index, char in enumerate(text):
        if char == "<" and not text[index + 1 : index + 2].isalpha():
            continue  # a comparison (`u0 < N`), not a repr
        if char in _OPENERS:
            stack.append((char, index))
        elif char in _CLOSERS and stack and stack[-1][0] == _OPENERS[_CLOSERS.index(char)]:
            stack.pop()
        elif char in "'\"`" and not (char == "'" and index and text[index - 1].isalnum()):  # not it's
            if stack and stack[-1][0] == char:
                stack.pop()
            else:
                stack.append((char, index))
    return stack[0][1] if stack else len(text)
