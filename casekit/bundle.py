"""The bundle: one case as one self-contained TOML file (scripts embedded).

Writing renders the `Case` dataclasses; reading checks every field against the
same dataclasses, so a malformed bundle is one clear error naming the file and
the field (`cases/x.toml: field 'observations.pre.sites[0].line': expected an
integer, got 'six'`), never a traceback.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import math
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import tomli_w

from casekit.errors import BundleError, BundleWriteError, CaseIdError, ScriptNameError
from casekit.fsutil import UnreadableFile, read_regular_bytes, write_atomic
from casekit.includes import IncludeError, check_includes, check_script_name
from casekit.model import Case, RecordedEnvironment, ScriptRole, ScriptSource, to_plain

SCHEMA_VERSION = 1
CASE_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")
# Bounds: a shared archive is untrusted input; nothing in it may make casekit read or hold without limit.
MAX_BUNDLE_BYTES = 32 * 1024 * 1024
MAX_SCRIPT_CHARS = 1024 * 1024
MAX_STRING_CHARS = 2 * 1024 * 1024
MAX_ITEMS = 100_000  # per list or table
MAX_DEPTH = 32  # nesting of free-form tables (environment)
MAX_INT = 2**63
# The environment table: every key casekit writes or reads has its type (RecordedEnvironment); a key it
# does not know (a newer casekit's record) is plain TOML data that no reader takes as anything but text.
ENVIRONMENT_FIELDS: dict[str, Any] = typing.get_type_hints(RecordedEnvironment)
FIELD_ORDER = [
    "schema_version",
    "id",
    "title",
    "tags",
    "created",
    "backend",
    "notes",
    "fix_summary",
    "rollback_notes",
    "provenance",
    "environment",
    "scripts",
    "observations",
    "perf",
    "replays",
]


def check_case_id(case_id: str) -> str:
    """Case ids are slugs: lower-case letters, digits, '.', '_', '-'; nothing that could leave the archive."""
    if not isinstance(case_id, str) or not CASE_ID.fullmatch(case_id) or ".." in case_id:
        raise CaseIdError(
            f"invalid case id {case_id!r}: use a slug of lower-case letters, digits, '.', '_' and '-' "
            "(at most 80 characters, starting with a letter or digit)"
        )
    return case_id


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:60].strip("-") or "case"


# Words a title needs and an id does not ("item() branch in step" -> item-branch-step).
_FILLER = frozenset("a an and at by for from in into is it its of on or the to when where which while with".split())
ID_WORDS, ID_CHARS = 4, 32


def case_id_from_title(title: str) -> str:
    """A short default case id from a title: its first few meaningful words, at most 32 characters,
    cut at a word (a slug of the whole title is a mouthful to type in `show`, `replay --case`)."""
    words = slugify(title).split("-")
    kept = [w for w in words if w not in _FILLER] or words
    chosen: list[str] = []
    for word in kept[:ID_WORDS]:
        if chosen and len("-".join([*chosen, word])) > ID_CHARS:
            break
        chosen.append(word)
    return "-".join(chosen)[:ID_CHARS].strip("-") or "case"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def case_to_toml(case: Case) -> str:
    plain = to_plain(case)
    plain["scripts"] = {role.value: plain.pop(role.value) for role in ScriptRole if role.value in plain}
    written = {key: value for key, value in plain.items() if _written(case, key, value)}
    ordered = {key: written[key] for key in FIELD_ORDER if key in written}
    ordered.update({k: v for k, v in written.items() if k not in ordered})
    # A multi-line string reads its line breaks back as "\n": one holding "\r" is written escaped, whole
    # (a script's CRLF would otherwise be lost, and its hash with it).
    return tomli_w.dumps(ordered, multiline_strings=not _holds_carriage_return(ordered))


def _written(case: Case, key: str, plain: Any) -> bool:
    """An empty list or table of the case's is left out (it reads back empty); a table that stands for a
    value with nothing known in it (an empty [provenance]) is written, or it would read back as no value."""
    return plain not in ({}, []) or dataclasses.is_dataclass(getattr(case, key, None))


def _holds_carriage_return(value: Any) -> bool:
    if isinstance(value, str):
        return "\r" in value
    if isinstance(value, dict):
        return any(_holds_carriage_return(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_carriage_return(item) for item in value)
    return False


def content_hash(case: Case) -> str:
    """What defines a case's behaviour (its scripts and backend): the key of bisection caches."""
    post = case.post.sha256 if case.post else ""
    return sha256_text(f"{case.pre.sha256}:{post}:{case.backend}")[:16]


def save_case(case: Case, path: Path) -> None:
    """Write atomically; a failed write (disk full, read-only folder) leaves the file as it was."""
    try:
        write_atomic(path, case_to_toml(case))
    except OSError as error:
        raise BundleWriteError(f"cannot write {path}: {error.strerror or error} (the file is as it was)") from None


def load_case(path: Path) -> Case:
    """Read and validate one bundle: a regular file (no symlink, device or FIFO) of bounded size."""
    return parse_case(read_regular_text(path, MAX_BUNDLE_BYTES, BundleError), path)


def read_regular_text(path: Path, limit: int, error: Any) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes, never following a symlink.

    `error(path, field, problem)` builds the exception (BundleError for bundles).
    """
    try:
        raw = read_regular_bytes(path, limit)
    except FileNotFoundError:
        raise error(path, None, "no such file") from None
    except UnreadableFile as why:
        raise error(path, None, str(why)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as failure:
        raise error(path, None, f"cannot read: not UTF-8 ({failure.reason} at byte {failure.start})") from None


def parse_case(text: str, path: Path | str = "<bundle>") -> Case:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise BundleError(path, None, f"not valid TOML: {error}") from None
    except RecursionError:  # tomllib recurses per level of arrays and inline tables
        raise BundleError(path, None, "not valid TOML: nested too deeply") from None
    version = data.get("schema_version")
    if version is None:
        raise BundleError(path, "schema_version", "missing (is this a casekit bundle?)")
    if version != SCHEMA_VERSION:
        raise BundleError(
            path, "schema_version", f"unsupported version {version!r} (this casekit reads {SCHEMA_VERSION})"
        )
    scripts = data.pop("scripts", None)
    if scripts is not None and not isinstance(scripts, dict):
        raise BundleError(path, "scripts", f"expected a table, got {_describe(scripts)}")
    if not scripts or ScriptRole.PRE not in scripts:
        raise BundleError(path, "scripts.pre", "missing: a bundle embeds at least the pre-fix script")
    unknown = set(scripts) - set(ScriptRole)
    if unknown:
        raise BundleError(path, f"scripts.{sorted(unknown)[0]}", "unknown script (expected 'pre' and 'post')")
    for role, script in scripts.items():  # checked here so that an error names the field as the file spells it
        from_plain(ScriptSource, script, path, f"scripts.{role}")
    data.update({role.value: scripts[role] for role in ScriptRole if role in scripts})
    case = from_plain(Case, data, path, "")
    check_id_field(case, path)
    check_environment(case.environment, path)
    for which in ScriptRole:
        script = case.script(which)
        if script:
            try:
                check_script_name(script.name)
            except ScriptNameError as error:
                raise BundleError(path, f"scripts.{which}.name", str(error)) from None
        if script and len(script.source) > MAX_SCRIPT_CHARS:
            raise BundleError(path, f"scripts.{which}.source", f"over {MAX_SCRIPT_CHARS} characters")
        if script and sha256_text(script.source) != script.sha256:
            raise BundleError(path, f"scripts.{which}.sha256", "does not match the embedded source (edited by hand?)")
    _check_included_files(case, path)
    return case


def _check_included_files(case: Case, path: Path | str) -> None:
    names = [script.name for which in ScriptRole if (script := case.script(which))]
    try:
        check_includes(case.includes, names)
    except IncludeError as error:
        raise BundleError(path, "includes", str(error)) from None


def check_environment(environment: dict[str, Any], path: Path | str) -> None:
    """Known environment keys have exact types; every other value is plain data (no datetimes)."""
    for key, value in environment.items():
        where = f"environment.{key}"
        if key in ENVIRONMENT_FIELDS:
            from_plain(ENVIRONMENT_FIELDS[key], value, path, where)
        else:
            check_plain(value, path, where, 0)


def check_plain(value: Any, path: Path | str, where: str, depth: int) -> None:
    """A free-form value: strings, finite numbers, booleans, and lists/tables of them, bounded."""
    if depth > MAX_DEPTH:
        raise BundleError(path, where, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        _check_count(value, path, where)
        for key, item in value.items():
            check_plain(item, path, _join(where, str(key)), depth + 1)
    elif isinstance(value, list):
        _check_count(value, path, where)
        for i, item in enumerate(value):
            check_plain(item, path, f"{where}[{i}]", depth + 1)
    elif isinstance(value, (dt.datetime, dt.date, dt.time)):
        raise BundleError(path, where, f"a TOML date/time is not allowed here, got {_describe(value)}")
    elif isinstance(value, str):
        _check_string(value, path, where)
    elif isinstance(value, float):
        _check_float(value, path, where)
    elif isinstance(value, int) and not isinstance(value, bool):
        _check_int(value, path, where)


def _check_count(value: Any, path: Path | str, where: str) -> None:
    if len(value) > MAX_ITEMS:
        raise BundleError(path, where or None, f"over {MAX_ITEMS} items")


def _check_string(value: str, path: Path | str, where: str) -> str:
    if len(value) > MAX_STRING_CHARS and not where.endswith(".source"):
        raise BundleError(path, where, f"over {MAX_STRING_CHARS} characters")
    return value


def _check_float(value: float, path: Path | str, where: str) -> float:
    if not math.isfinite(value):
        raise BundleError(path, where, f"expected a finite number, got {value!r}")
    return value


def _check_int(value: int, path: Path | str, where: str) -> int:
    if abs(value) >= MAX_INT:
        raise BundleError(path, where, "integer out of range")
    return value


def check_id_field(case: Case, path: Path | str) -> None:
    try:
        check_case_id(case.id)
    except CaseIdError as error:
        raise BundleError(path, "id", str(error)) from None


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 40 else text[:37] + "..."


def from_plain(tp: Any, value: Any, path: Path | str, where: str) -> Any:
    """Build `tp` from TOML data, checking types; errors name the field path."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        check_plain(value, path, where, 0)
        return value
    if origin in (typing.Union, types.UnionType):
        return _from_union(args, value, path, where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise BundleError(path, where or None, f"expected a table, got {_describe(value)}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        names = {f.name for f in dataclasses.fields(tp)}
        for key in value:
            if key not in names:
                raise BundleError(path, _join(where, key), "unknown field")
        for fld in dataclasses.fields(tp):
            if fld.name in value:
                kwargs[fld.name] = from_plain(hints[fld.name], value[fld.name], path, _join(where, fld.name))
            elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                raise BundleError(path, _join(where, fld.name), "missing")
        return tp(**kwargs)  # type: ignore[operator]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except (ValueError, TypeError):
            allowed = ", ".join(m.value for m in tp)
            raise BundleError(path, where, f"{_describe(value)} is not one of: {allowed}") from None
    if origin is list:
        if not isinstance(value, list):
            raise BundleError(path, where, f"expected a list, got {_describe(value)}")
        _check_count(value, path, where)
        return [from_plain(args[0], item, path, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise BundleError(path, where, f"expected a table, got {_describe(value)}")
        _check_count(value, path, where)
        key_type = args[0]
        if isinstance(key_type, type) and issubclass(key_type, enum.Enum):  # script -> ...: keys are enum values
            keys = [from_plain(key_type, k, path, _join(where, str(k))) for k in value]
        else:
            keys = [str(k) for k in value]
        return {
            key: from_plain(args[1], v, path, _join(where, str(k)))
            for key, (k, v) in zip(keys, value.items(), strict=True)
        }
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BundleError(path, where, f"expected a number, got {_describe(value)}")
        return _check_float(float(value), path, where)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BundleError(path, where, f"expected an integer, got {_describe(value)}")
        return _check_int(value, path, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise BundleError(path, where, f"expected true or false, got {_describe(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise BundleError(path, where, f"expected a string, got {_describe(value)}")
        return _check_string(value, path, where)
    raise BundleError(path, where, f"casekit cannot check a field of type {tp!r}")  # a model change without a loader


def _from_union(options: tuple[Any, ...], value: Any, path: Path | str, where: str) -> Any:
    """`value` as the option of its own kind; a union of several is of plain scalars (bool | int | float | str)."""
    if value is None and type(None) in options:
        return None
    options = tuple(a for a in options if a is not type(None))
    if len(options) == 1:
        return from_plain(options[0], value, path, where)
    if not all(option in _SCALARS for option in options):
        raise BundleError(path, where, f"casekit cannot check a field of type {options!r}")  # a model change
    for option in options:  # in the order written: `int | float` keeps 3 an integer
        if isinstance(value, _SCALARS[option]) and not (option is not bool and isinstance(value, bool)):
            return from_plain(option, value, path, where)
    names = " or ".join(_SCALAR_NAMES[option] for option in options)
    raise BundleError(path, where, f"expected {names}, got {_describe(value)}")


# The TOML values each scalar field type takes (a number field takes an integer too), and how errors name it.
_SCALARS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
_SCALAR_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
