"""Fuzzed bundles: mutants of the real starter bundles through validate, list, show, report and replay's
host side. What the loader accepts, every command handles; the rest is one BundleError. Never a traceback,
never a file outside the folders casekit was given.

CASEKIT_FUZZ_EXAMPLES sets the number of mutants (default 1000; CI runs the default).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime as dt
import enum
import hashlib
import json
import os
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekit.archive.store import Archive
from casekit.bundle import parse_case, sha256_text
from casekit.classify import Axes, attribute_changes, attributed, classify_case, recorded_axes
from casekit.errors import BundleError, CasekitError
from casekit.model import Case, RecordedEnvironment, ScriptRole, to_plain
from casekit.replay.document import result_entry
from casekit.replay.run import _write_scripts, case_pins
from casekit.report.formats import get_format
from casekit.report.summary import summarize
from casekit.report.text import case_summary, replay_table, result_text

from ..conftest import ROOT, run_casekit

STARTERS = sorted((ROOT / "cases").glob("*.toml"))
EXAMPLES = int(os.environ.get("CASEKIT_FUZZ_EXAMPLES", "1000"))
BASES = [tomllib.loads(path.read_text()) for path in STARTERS]

hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "\x00", "../../x", "/etc/passwd", "~/.bashrc", "a" * 300, "\u202e\ufeff", "é.py", "x\n.py"]),
    st.just("y" * 5000),
)
leaf = st.one_of(
    hostile_text,
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    st.dates(),
    st.times(),
)
value = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def paths_of(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into the nested tables and lists."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, item in data.items():
            found += paths_of(item, (*prefix, key))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += paths_of(item, (*prefix, i))
    return found


def set_at(data: Any, path: tuple, new: Any, delete: bool) -> None:
    for key in path[:-1]:
        data = data[key]
    if delete:
        del data[path[-1]]
    else:
        data[path[-1]] = new


@st.composite
def mutants(draw: st.DrawFn) -> str:
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = paths_of(data)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add-unknown", "script"]))
        if action == "add-unknown" and isinstance(data, dict):
            data[draw(st.text(min_size=1, max_size=8))] = draw(value)
        elif action == "script":  # edit a script's name or source and keep its hash right: the deep checks run
            scripts = data.get("scripts")
            if not isinstance(scripts, dict):  # an earlier mutation made it something else: make it a table again
                scripts = data["scripts"] = {}
            which = draw(st.sampled_from([w for w in ("pre", "post") if w in scripts] or ["pre"]))
            script = scripts.setdefault(which, {})
            if isinstance(script, dict):
                script[draw(st.sampled_from(["name", "source"]))] = draw(hostile_text)
                if isinstance(script.get("source"), str):
                    script["sha256"] = sha256_text(script["source"])
        else:
            set_at(data, path, draw(value), delete=action == "delete")
    text = tomli_w.dumps(data)
    if draw(st.integers(0, 9)) == 0:  # sometimes break the TOML itself
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.text(max_size=5)) + text[cut + 5 :]
    return text


def exercise(text: str, folder: Path) -> str:
    """What each command does with a bundle, in-process. Returns 'rejected' or 'accepted'."""
    try:
        case = parse_case(text, folder / "fuzz.toml")
    except CasekitError:
        return "rejected"
    json.dumps(to_plain(case), allow_nan=False)  # show --json
    case_summary(case)  # show
    case_pins([case])  # replay: library pins
    scripts = folder / "batch"
    paths = _write_scripts([case], scripts)  # replay: host-side script files
    for path in paths.values():
        assert scripts.resolve() in path.resolve().parents
    # replay: classification against the recorded, and against a run that saw none of its breaks (every
    # recorded site gone: attribution runs, with a target whose release knows one setting)
    target = Axes("2.13.0+cpu", {"numpy": "2.0"}, {"capture_scalar_outputs": (True, False)})
    for observed in (
        dict(case.observations),
        {w: dataclasses.replace(o, sites=[]) for w, o in case.observations.items()},
    ):
        result = classify_case(case, "fuzz", observed)
        said = attribute_changes(recorded_axes(case), [("fuzz", target, result)])
        result = attributed(result, said["fuzz"])
        entry = result_entry(result)
        replay_table([entry])
        result_text(entry)
    summary = summarize([case])  # list / report
    for name in ("md", "html", "junit", "json"):
        get_format(name).render(summary)
    archive = Archive(folder / "cases")
    saved = archive.save(case)  # a replay's history write: what was accepted is written back loadable
    assert archive.load(case.id) == case, saved
    return "accepted"


def listing() -> set[str]:
    """The repository's top folder and its starter archive (hypothesis keeps its own cache beside them)."""
    return ({*os.listdir(ROOT)} - {".hypothesis"}) | {f"cases/{name}" for name in os.listdir(ROOT / "cases")}


@pytest.mark.slow
def test_fuzzed_bundles_never_crash_a_command(tmp_path: Path) -> None:
    seen = {"accepted": 0, "rejected": 0}
    outside_before = listing()

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutants())
    def run(text: str) -> None:
        folder = tmp_path / f"m{sum(seen.values())}"
        folder.mkdir()
        seen[exercise(text, folder)] += 1

    run()
    assert sum(seen.values()) >= EXAMPLES
    assert seen["accepted"] > 0 and seen["rejected"] > 0, seen  # both paths were exercised
    assert listing() == outside_before
    print(f"fuzzed bundles: {seen}")


@pytest.mark.slow
def test_a_sample_of_mutants_through_the_cli(tmp_path: Path) -> None:
    """validate, list and show --json as a user runs them: one line per bad bundle, never a traceback."""
    archive = tmp_path / "cases"
    archive.mkdir()
    samples: list[str] = []

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutants())
    def collect(text: str) -> None:
        samples.append(text)

    collect()
    for i, text in enumerate(samples):
        (archive / f"m{i}.toml").write_text(text)
    ids = [f"m{i}" for i in range(len(samples))]
    for args in (["validate"], ["list"], *(["show", case_id, "--json", "-"] for case_id in ids[:6])):
        done = run_casekit(*args, "--archive", str(archive), timeout=120)
        assert "Traceback" not in done.stderr + done.stdout, (args, done.stderr[-2000:])
        assert done.returncode in (0, 1, 2), (args, done.returncode)
    # nothing but the bundles and casekit's own scratch (the derived index, the lock, their .gitignore)
    scratch = {".casekit", ".casekit.lock", ".gitignore"}
    assert sorted(p.name for p in archive.iterdir() if p.name not in scratch) == sorted(f"{i}.toml" for i in ids)


@pytest.mark.slow
def test_accepted_mutants_still_replay(tmp_path: Path) -> None:
    """What the loader accepts, replay runs for real (one probe): a result per case, no traceback."""
    archive = tmp_path / "cases"
    archive.mkdir()
    accepted: list[str] = []

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutants())
    def collect(text: str) -> None:
        if len(accepted) >= 4:
            return
        try:
            case = parse_case(text, "mutant.toml")
        except CasekitError:
            return
        if case.id not in accepted:
            accepted.append(case.id)
            (archive / f"{case.id}.toml").write_text(text)

    collect()
    assert accepted
    out = tmp_path / "replay.json"
    done = run_casekit("replay", "--archive", str(archive), "--no-record", "--json", str(out), timeout=600)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert sorted({r["case"] for r in results}) == sorted(accepted)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["scripts"]["pre"].update(source="x" * 1_100_000), "scripts.pre.source"),
        (lambda d: d.update(title="t" * 2_100_000), "title"),
        (lambda d: d.update(tags=["t"] * 100_001), "tags"),
        (lambda d: d.setdefault("environment", {}).update(packages=5), "environment.packages"),
        (lambda d: d.setdefault("environment", {}).update(built=dt.datetime(2024, 1, 1)), "environment.built"),
        (lambda d: d.update(created=dt.datetime(2024, 1, 1)), "created"),
        (lambda d: d["scripts"]["pre"].update(name="x\x00.py"), "scripts.pre.name"),
        (lambda d: d["scripts"]["pre"].update(name=7), "scripts.pre.name"),  # as the file spells it
        (lambda d: d["environment"].update(torch=["2.13.0"]), "environment.torch"),
        (lambda d: d["environment"].update(cpu_count="8"), "environment.cpu_count"),
        (lambda d: d["environment"].update(dynamo_settings={"x": 1}), "environment.dynamo_settings.x"),
        (
            lambda d: d["environment"].update(dynamo_settings={"x": {"value": [1]}}),
            "environment.dynamo_settings.x.value",
        ),
    ],
)
def test_bounds_and_exact_types_are_field_errors(edit: Any, field: str) -> None:
    data = copy.deepcopy(BASES[0])
    edit(data)
    if "source" in field:
        data["scripts"]["pre"]["sha256"] = sha256_text(data["scripts"]["pre"]["source"])
    with pytest.raises(CasekitError, match=rf"field '{field.replace('.', '[.]')}'"):
        parse_case(tomli_w.dumps(data), "fuzz.toml")


# ------------------------------------------------- every field of a full bundle, every wrong type
#
# The rule the hypothesis mutants sample, checked exhaustively: replace each field of a real bundle by a
# value of each TOML type it is not; the loader refuses it in one line naming that field (or a field
# inside it), or every command handles it. The full bundle is a starter with every field the model
# has filled in (replays, includes, every environment key casekit records), so a field added to the
# model joins this test by itself (`test_the_full_bundle_holds_every_field_of_the_model` says so).

WRONG_TYPES: dict[str, Any] = {
    "string": "text",
    "integer": 7,
    "float": 2.5,
    "boolean": True,
    "list": ["x", 1],
    "table": {"k": "v"},
    "datetime": dt.datetime(2024, 1, 2, 3, 4, 5),
}
INCLUDED = b"\x00\x01binary"


def toml_type(value: Any) -> str:
    kinds = {bool: "boolean", int: "integer", float: "float", str: "string", list: "list", dict: "table"}
    return kinds.get(type(value), "datetime")


def example(tp: Any) -> Any:
    """A plain value of model type `tp` with every field of every table present."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return example(next(a for a in args if a is not type(None)))
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return {f.name: example(hints[f.name]) for f in dataclasses.fields(tp)}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp)).value
    if origin is list:
        return [example(args[0])]
    if origin is dict:
        return {str(example(args[0])): example(args[1])}
    return {bool: True, int: 3, float: 0.5, str: "text"}.get(tp, "text")


def _unwrapped(tp: Any) -> Any:
    """An optional field's type without its None; the type itself otherwise."""
    options = [a for a in typing.get_args(tp) if a is not type(None)]
    return options[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(options) == 1 else tp


def filled(value: Any, tp: Any) -> Any:
    """`value` (of model type `tp`) with every absent field added and every empty list or table given an item."""
    tp = _unwrapped(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        hints = typing.get_type_hints(tp)
        return {
            f.name: filled(value[f.name], hints[f.name]) if f.name in value else example(hints[f.name])
            for f in dataclasses.fields(tp)
        }
    if origin is list and isinstance(value, list):
        return [filled(item, args[0]) for item in value] or example(tp)
    if origin is dict and isinstance(value, dict):
        return {key: filled(item, args[1]) for key, item in value.items()} or example(tp)
    return value


def model_types(tp: Any = Case) -> dict[str, Any]:
    """Case's field types, with the environment table as casekit records it."""
    return (
        {**typing.get_type_hints(tp), "environment": RecordedEnvironment} if tp is Case else typing.get_type_hints(tp)
    )


def full_bundle() -> dict[str, Any]:
    """The richest starter with every model field present (every list and table holding an item), two included
    files, and a key of the environment this casekit does not know."""
    data = copy.deepcopy(max(BASES, key=lambda base: len(paths_of(base))))
    data.update(data.pop("scripts"))
    data = {key: filled(data.get(key), hint) if key in data else example(hint) for key, hint in model_types().items()}
    included = {"path": "helper.py", "sha256": sha256_text("X = 1\n"), "text": "X = 1\n"}  # text or base64: one each
    binary = {"path": "data/blob.bin", "sha256": hashlib.sha256(INCLUDED).hexdigest()}
    data["includes"] = [included, binary | {"base64": base64.b64encode(INCLUDED).decode()}]
    data["environment"]["recorded_by"] = "a newer casekit"
    data["scripts"] = {role.value: data.pop(role.value) for role in ScriptRole}
    return data


def model_shape(path: tuple) -> tuple:
    """A key path of a bundle (scripts lifted to pre/post) as the model spells it: a list's item is "[]",
    a table keyed by data (scripts, settings, packages) is "{}"."""
    tp: Any = Case
    out: list[Any] = []
    for key in path:
        tp = _unwrapped(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if dataclasses.is_dataclass(tp):
            tp = model_types(tp).get(key, Any)  # Any: a key the model does not name (the free-form environment)
        elif origin in (list, dict):
            key, tp = "[]" if origin is list else "{}", args[-1]
        out.append(key)
    return tuple(out)


def field_name(path: tuple) -> str:
    """A key path as casekit's errors spell it: observations.pre.sites[0].line."""
    return "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path).lstrip(".")


def shape(path: tuple) -> tuple:
    return tuple("[]" if isinstance(key, int) else key for key in path)


def field_mutants() -> list[tuple[str, str, str]]:
    """(field, wrong type, bundle text) for one path of each shape (a list's items share one) over the
    starters and the full bundle, each replaced by a value of every other TOML type."""
    chosen: dict[tuple, tuple[dict[str, Any], tuple]] = {}
    for base in [full_bundle(), *BASES]:
        for path in paths_of(base):
            chosen.setdefault(shape(path), (base, path))
    found = []
    for base, path in chosen.values():
        original: Any = base
        for key in path:
            original = original[key]
        for kind, wrong in WRONG_TYPES.items():
            if kind != toml_type(original):
                data = copy.deepcopy(base)
                set_at(data, path, copy.deepcopy(wrong), delete=False)
                found.append((field_name(path), kind, tomli_w.dumps(data)))
    return found


def test_the_full_bundle_holds_every_field_of_the_model() -> None:
    def model(tp: Any, prefix: tuple = ()) -> set[tuple]:
        tp = _unwrapped(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if dataclasses.is_dataclass(tp):
            return {
                s for name, hint in model_types(tp).items() for s in {(*prefix, name)} | model(hint, (*prefix, name))
            }
        if origin in (list, dict):
            item = (*prefix, "[]" if origin is list else "{}")
            return {item} | model(args[-1], item)
        return set()

    data = full_bundle()
    parse_case(tomli_w.dumps(data), "full.toml")  # the full bundle itself loads
    data.update(data.pop("scripts"))
    held = {model_shape(path) for path in paths_of(data)}
    missing = sorted(".".join(p) for p in model(Case) - held)
    assert not missing, missing


@pytest.mark.slow
def test_every_field_given_every_wrong_type_is_named_or_handled(tmp_path: Path) -> None:
    mutants = field_mutants()
    outcomes: dict[str, int] = {"accepted": 0, "rejected": 0}
    wrong: list[str] = []
    for i, (field, kind, text) in enumerate(mutants):
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        try:
            parse_case(text, folder / "fuzz.toml")
        except BundleError as error:
            said = re.search(r"field '([^']*)'", str(error))
            named = said[1] if said else ""
            if named != field and not named.startswith((f"{field}.", f"{field}[")) or "\n" in str(error):
                wrong.append(f"{field} as a {kind}: the error names {named!r}: {error}")
            outcomes["rejected"] += 1
            continue
        try:
            outcomes[exercise(text, folder)] += 1
        except Exception as crash:  # noqa: BLE001 - the finding: validate accepted what a command dies on
            wrong.append(f"{field} as a {kind}: validate accepts it, then {type(crash).__name__}: {crash}")
    assert not wrong, "\n".join(wrong[:40]) + f"\n({len(wrong)} in all)"
    assert len(mutants) > 1500 and outcomes["accepted"] and outcomes["rejected"], outcomes


@pytest.mark.process
def test_a_bundle_validate_refuses_is_named_and_replay_goes_on_with_the_others(tmp_path: Path) -> None:
    """The archive of the report: `environment.torch` as a list passed validate, then every replay of the
    archive died at the end (no table, no JSON). Now validate names the field, and a real replay names
    the bundle, replays the other case and writes its table and JSON."""
    archive = tmp_path / "cases"
    archive.mkdir()
    data = tomllib.loads((ROOT / "cases" / "tensor-if.toml").read_text())
    data["environment"]["torch"] = ["2.13.0"]
    (archive / "tensor-if.toml").write_text(tomli_w.dumps(data))
    (archive / "item-branch.toml").write_text((ROOT / "cases" / "item-branch.toml").read_text())
    said = "tensor-if.toml: field 'environment.torch': expected a string, got ['2.13.0']"
    checked = run_casekit("validate", "--archive", str(archive))
    assert checked.returncode == 1 and said in checked.stdout + checked.stderr, checked.stdout + checked.stderr
    out = tmp_path / "replay.json"
    done = run_casekit("replay", "--archive", str(archive), "--no-record", "--json", str(out), timeout=600)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert said in done.stderr and done.returncode == 2, done.stderr[-2000:]
    assert [r["case"] for r in json.loads(out.read_text())["results"]] == ["item-branch"]
    assert "item-branch  unchanged" in done.stdout  # the table


@pytest.mark.parametrize("protected", [True, False], ids=["escaped", "control-multiline"])
def test_a_carriage_return_survives_a_save(protected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay's --record writes an accepted bundle back: a CRLF script (and its hash) must survive it.
    A TOML multi-line string reads "\\r\\n" back as "\\n", so such a bundle is written with escaped strings."""
    import casekit.bundle as bundle

    if not protected:
        monkeypatch.setattr(bundle, "_holds_carriage_return", lambda value: False)
    data = copy.deepcopy(BASES[0])
    source = data["scripts"]["pre"]["source"].replace("\n", "\r\n")
    data["scripts"]["pre"].update(source=source, sha256=sha256_text(source))
    data["notes"] = "line one\r\nline two"
    case = parse_case(tomli_w.dumps(data), "crlf.toml")
    if not protected:  # the control: written multi-line, the script's CRLF is lost and its hash no longer holds
        with pytest.raises(BundleError, match="scripts.pre.sha256"):
            bundle.parse_case(bundle.case_to_toml(case), "saved.toml")
        return
    assert bundle.parse_case(bundle.case_to_toml(case), "saved.toml") == case
