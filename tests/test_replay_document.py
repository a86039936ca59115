"""The casekit.replay/1 document: one schema, shipped in the package; what the writer makes it reads;
whatever else arrives (wrong types, not JSON, huge, a folder, a FIFO) is one line naming the file."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import casekit.replay.document as replay_document_module
from casekit.model import ScriptRole, ScriptStatus, Severity, SiteClass, Verdict
from casekit.replay.document import (
    REPLAY_SCHEMA,
    ReplayDocumentError,
    parse_replay_document,
    read_replay_document,
    replay_schema,
)
from casekit.replay.shard import merge_reports
from casekit.report.summary import cells_from_results
from casekit.report.text import replay_document_text

from .conftest import FIXTURES, run_casekit

RECORDED = FIXTURES / "report" / "replay-torch-2.5.1.json"  # a real `replay --json` of the starter archive


def recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text())


def test_the_schema_ships_in_the_package_and_names_the_document() -> None:
    from importlib import resources

    assert resources.files("casekit.data").joinpath("replay-1.schema.json").is_file()
    assert REPLAY_SCHEMA == "casekit.replay/1" == replay_schema()["properties"]["schema"]["const"]


# That the schema's enums are the model's: tests/test_enum_tables.py, with every other enum-keyed table.


def test_a_real_replay_document_reads(tmp_path: Path) -> None:
    document = read_replay_document(RECORDED)
    assert len(document.results) == 9 and document.targets[0].label == "venv:torch-2.5.1"


def test_the_reader_returns_typed_entries_and_writes_back_the_same_json() -> None:
    """Every verdict, severity, status, class and script is its enum member; the strings stay in the JSON."""
    document = read_replay_document(RECORDED)
    for result in document.results:
        assert type(result.verdict) is Verdict and type(result.severity) is Severity
        assert all(type(role) is ScriptRole for role in result.scripts)
        for script in result.scripts.values():
            assert type(script.status) is ScriptStatus
            assert script.recorded_status is None or type(script.recorded_status) is ScriptStatus
            assert all(type(site.site_class) is SiteClass for site in script.sites)
    expected = recorded()
    for target in expected["targets"]:  # written before targets said what sandboxed them: that one is null
        assert "sandbox" not in target
        target["sandbox"] = None
    assert document.to_json() == expected  # key for key, value for value


CORRUPTIONS = [
    (lambda d: d["results"][0].__setitem__("severity", "fatal"), "results[0].severity"),
    (lambda d: d["results"][0]["scripts"]["pre"].__setitem__("graphs", "four"), "results[0].scripts.pre.graphs"),
    (lambda d: d["results"][0]["scripts"].__setitem__("sideways", None), "results[0].scripts"),
    (lambda d: d["results"][0].__setitem__("case", 7), "results[0].case"),
    (lambda d: d["targets"][0].__setitem__("seconds", -1), "targets[0].seconds"),
    (lambda d: d["results"][0]["scripts"]["pre"]["sites"][0].__setitem__("class", "vanished"), "sites[0].class"),
    (lambda d: d.__setitem__("results", {"a": 1}), "results"),
    (lambda d: d.pop("targets"), "(document)"),
    (lambda d: d.__setitem__("schema", "casekit.report/1"), "schema"),
]


@pytest.mark.parametrize(("corrupt", "field"), CORRUPTIONS)
def test_a_corrupted_document_is_rejected_naming_the_field(corrupt: Any, field: str, tmp_path: Path) -> None:
    data = recorded()
    corrupt(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReplayDocumentError) as error:
        read_replay_document(path)
    line = str(error.value)
    assert line.startswith(f"{path}: field '") and field in line.split(":")[1] and "\n" not in line


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


HOSTILE_FILES = {
    "not JSON": (lambda p: p.write_text("{"), "not valid JSON"),
    "NaN": (lambda p: p.write_text(RECORDED.read_text().replace('"seconds": 15.15', '"seconds": NaN')), "NaN"),
    "deep": (lambda p: p.write_text("[" * 200_000 + "]" * 200_000), "nested too deeply"),
    "deep object": (lambda p: p.write_text('{"schema": ' + "[" * 200_000 + "]" * 200_000 + "}"), "nested too deeply"),
    "binary": (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "not UTF-8"),
    "a list": (lambda p: p.write_text("[1, 2]"), "field 'schema'"),
    "huge integer": (lambda p: p.write_text('{"schema": ' + "9" * 5000 + "}"), "not valid JSON"),
    "a folder": (lambda p: p.mkdir(), "a folder"),
    "a FIFO": (_fifo, "not a regular file"),
    "missing": (lambda p: None, "no such file"),
}


@pytest.mark.parametrize("name", HOSTILE_FILES)
def test_hostile_files_are_one_clear_line(name: str, tmp_path: Path) -> None:
    make, words = HOSTILE_FILES[name]
    path = tmp_path / "results.json"
    make(path)
    with pytest.raises(ReplayDocumentError) as error:
        read_replay_document(path)
    assert str(error.value).startswith(f"{path}: ") and words in str(error.value)
    assert "\n" not in str(error.value) and len(str(error.value)) < 400


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_document_module, "MAX_DOCUMENT_BYTES", 1000)
    with pytest.raises(ReplayDocumentError, match="over the 1000 byte limit"):
        read_replay_document(RECORDED)


def test_merge_and_report_give_one_line_not_a_traceback(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "pipe.json")
    wrong = tmp_path / "wrong.json"
    data = recorded()
    data["results"][0]["scripts"]["pre"]["sites"] = "many"
    wrong.write_text(json.dumps(data))
    for path, words in ((fifo, "not a regular file"), (wrong, "field 'results[0].scripts.pre.sites'")):
        merged = run_casekit("merge", str(path), timeout=120)
        reported = run_casekit(
            "report", "--archive", str(FIXTURES / "report" / "archive"), "--results", str(path), "--out", "-",
            "--format", "md", timeout=120,
        )  # fmt: skip
        for done in (merged, reported):
            assert done.returncode == 2 and "Traceback" not in done.stderr
            [line] = done.stderr.strip().splitlines()
            assert line.startswith(f"casekit: error: {path}: ") and words in line


# ----------------------------------------------------------------- fuzzing

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _paths(child, (*prefix, index))
    return out


BASE = recorded()
BASE["results"] = BASE["results"][:2]
BASE_PATHS = _paths(BASE)[1:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(BASE_PATHS), JSON_VALUES), min_size=1, max_size=3))
def test_mutated_documents_are_read_or_refused_never_a_crash(mutations: list[tuple[tuple[Any, ...], Any]]) -> None:
    """Every accepted document is one the rest of casekit can use; every refused one is one line."""
    data = copy.deepcopy(BASE)
    for path, value in mutations:
        holder = data
        try:
            for key in path[:-1]:
                holder = holder[key]
            holder[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    try:
        document = parse_replay_document(data, "fuzz.json")
    except ReplayDocumentError as error:
        assert str(error).startswith("fuzz.json: ") and "\n" not in str(error)
        return
    cells_from_results(document, "fuzz.json")  # the report reads it
    replay_document_text(document, verbose=True)  # and merge prints it


def test_a_minimal_document_reads_and_merges(tmp_path: Path) -> None:
    """A minimal valid document (only the required fields) merges and renders: the schema and its readers agree.

    A result requires every field casekit has always written for it (its readers index them); a target its label."""
    minimal = {
        "schema": REPLAY_SCHEMA,
        "targets": [{"label": "t"}],
        "results": [
            {
                "case": "a",
                "target": "t",
                "verdict": "changed",
                "severity": "warn",
                "reasons": [],
                "scripts": {},
                "rollback": None,
            }
        ],
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(minimal))
    assert merge_reports([path]).data.results[0].case == "a"
    assert cells_from_results(read_replay_document(path), "m.json")[0].verdict is Verdict.CHANGED
    assert "a on t: changed (warn)" in replay_document_text(read_replay_document(path))
