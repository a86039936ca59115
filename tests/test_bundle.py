"""Bundles: round trip, validation that names file and field, hostile ids, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bundle import case_to_toml, check_case_id, load_case, parse_case
from casekit.errors import BundleError, CaseIdError
from casekit.model import (
    CaptureRecord,
    Case,
    FullgraphStatus,
    Gate,
    Provenance,
    ReplayRecord,
    ScriptRole,
    ScriptStatus,
    Severity,
    SiteClass,
    SiteVerdict,
    Verdict,
)

from .cases import make_case
from .conftest import run_casekit


def test_round_trip_keeps_every_field():
    case = make_case()
    again = parse_case(case_to_toml(case))
    assert again == case


def test_a_table_with_nothing_known_in_it_reads_back_as_it_was_written():
    """Found by the bundle fuzzer: an empty [provenance] read as a Provenance with every field unknown, was
    written as nothing, and read back as no provenance at all (a replay's history write changed the case)."""
    case = make_case()
    case.provenance = Provenance()
    assert parse_case(case_to_toml(case)) == case
    case.provenance = None
    assert "provenance" not in case_to_toml(case) and parse_case(case_to_toml(case)) == case
    case.tags = []  # an empty list is still left out: it reads back empty
    assert "tags" not in case_to_toml(case) and parse_case(case_to_toml(case)) == case


def test_bundle_is_reviewable_toml_with_the_script_embedded():
    text = case_to_toml(make_case())
    assert text.startswith("schema_version = 1")
    assert "[scripts.pre]" in text and 'source = """' in text  # multi-line, diffable


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda t: t.replace("schema_version = 1", "schema_version = 99"), "schema_version", "unsupported version"),
        (lambda t: t.replace("schema_version = 1\n", ""), "schema_version", "missing"),
        (lambda t: t.replace("line = 6", 'line = "six"'), "observations.pre.sites[0].line", "expected an integer"),
        (lambda t: t.replace('status = "ok"', 'status = "fine"'), "observations.pre.status", "is not one of"),
        (lambda t: t.replace('title = "demo"', 'title = "demo"\ncolour = "red"'), "colour", "unknown field"),
        (lambda t: t.replace('id = "demo"', 'id = "../../etc/passwd"'), "id", "invalid case id"),
        (lambda t: t.replace("import torch", "import os"), "scripts.pre.sha256", "does not match"),
    ],
)
def test_bad_bundles_name_the_field(mutate, field, problem):
    text = mutate(case_to_toml(make_case()))
    with pytest.raises(BundleError) as error:
        parse_case(text, "cases/demo.toml")
    assert f"field '{field}'" in str(error.value)
    assert problem in str(error.value)
    assert str(error.value).startswith("cases/demo.toml")


def replayed_case() -> Case:
    """make_case with what a capture and a replay add: a waived gate, fullgraph status, a history record."""
    case = make_case()
    case.observations[ScriptRole.PRE].fullgraph_status = FullgraphStatus.ERROR
    case.capture = CaptureRecord(timeout_s=60.0, waived_gates=[Gate.COMPILED])
    case.replays = [
        ReplayRecord(
            at="2026-12-01T00:00:00+00:00",
            target="venv:torch-2.13",
            torch="2.13.0",
            runner="venv",
            verdict=Verdict.CHANGED,
            severity=Severity.WARN,
            statuses={ScriptRole.PRE: ScriptStatus.OK},
            sites=[SiteVerdict(ScriptRole.PRE, SiteClass.MOVED, "repro.py:7", "GB0124")],
            graphs={ScriptRole.PRE: 2},
        )
    ]
    return case


def test_the_loader_gives_enums_where_the_toml_has_strings():
    text = case_to_toml(replayed_case())
    assert 'verdict = "changed"' in text and 'waived_gates = [\n    "compiled",\n]' in text
    case = parse_case(text)
    assert case == replayed_case()
    assert [type(role) for role in case.observations] == [ScriptRole]
    assert type(case.observations[ScriptRole.PRE].fullgraph_status) is FullgraphStatus
    assert case.capture is not None and [type(gate) for gate in case.capture.waived_gates] == [Gate]
    [record] = case.replays
    assert type(record.verdict) is Verdict and type(record.severity) is Severity
    assert [(type(k), type(v)) for k, v in record.statuses.items()] == [(ScriptRole, ScriptStatus)]
    assert record.graphs is not None and [type(k) for k in record.graphs] == [ScriptRole]


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda t: t.replace("[observations.pre]", "[observations.middle]"), "observations.middle", "pre, post"),
        (lambda t: t.replace('[replays.statuses]\npre = "ok"', '[replays.statuses]\npre = "fine"'), "replays[0].statuses.pre", "is not one of"),
        (lambda t: t.replace('[replays.statuses]\npre = "ok"', '[replays.statuses]\nmid = "ok"'), "replays[0].statuses.mid", "pre, post"),
        (lambda t: t.replace('"compiled",', '"sideways",'), "capture.waived_gates[0]", "eager, compiled, timeout, fix"),
        (lambda t: t.replace('fullgraph_status = "error"', 'fullgraph_status = "maybe"'), "observations.pre.fullgraph_status", "ok, error"),
        (lambda t: t.replace('verdict = "changed"', 'verdict = "worse"'), "replays[0].verdict", "fix_broken, regressed"),
    ],
)  # fmt: skip
def test_unknown_enum_values_and_keys_are_refused_naming_the_field(mutate, field, problem):
    text = case_to_toml(replayed_case())
    mutated = mutate(text)
    assert mutated != text
    with pytest.raises(BundleError) as error:
        parse_case(mutated, "cases/demo.toml")
    line = str(error.value)
    assert line.startswith("cases/demo.toml") and f"field '{field}'" in line and problem in line and "\n" not in line


def test_not_toml_is_one_clear_error():
    with pytest.raises(BundleError, match="not valid TOML"):
        parse_case("this is = = not toml", "x.toml")


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "UPPER", ".hidden", "x" * 81, "a..b", "/abs", "ok\n"])
def test_hostile_ids_are_refused(bad):
    with pytest.raises(CaseIdError):
        check_case_id(bad)


def test_archive_refuses_paths_outside(tmp_path: Path):
    with pytest.raises(CaseIdError):
        Archive(tmp_path).path_for("../outside")


def test_atomic_save_leaves_old_bundle_when_interrupted(tmp_path: Path, monkeypatch):
    archive = Archive(tmp_path)
    archive.save(make_case())
    before = (tmp_path / "demo.toml").read_text()

    def explode(*args, **kwargs):
        raise KeyboardInterrupt

    import casekit.fsutil

    monkeypatch.setattr(casekit.fsutil.os, "replace", explode)
    changed = make_case()
    changed.title = "changed"
    with pytest.raises(KeyboardInterrupt):
        archive.save(changed)
    assert (tmp_path / "demo.toml").read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.process
def test_cli_validate_reports_bad_bundle_in_one_line(tmp_path: Path):
    archive = Archive(tmp_path)
    archive.save(make_case("good"))
    (tmp_path / "broken.toml").write_text(case_to_toml(make_case("broken")).replace("line = 6", "line = -"))
    result = run_casekit("validate", "--archive", str(tmp_path))
    assert result.returncode == 1
    assert "ok      " in result.stdout and "good.toml" in result.stdout
    assert "broken.toml" in result.stdout and "Traceback" not in result.stdout + result.stderr


@pytest.mark.process
def test_cli_show_bad_bundle_is_one_line_exit_2(tmp_path: Path):
    (tmp_path / "bad.toml").write_text("schema_version = 1\nid = 'bad'\n")
    result = run_casekit("show", "bad", "--archive", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "bad.toml: field 'scripts.pre': missing" in result.stderr


@pytest.mark.process
def test_cli_hostile_id_one_line(tmp_path: Path):
    result = run_casekit("show", "../../etc/passwd", "--archive", str(tmp_path))
    assert result.returncode == 2
    assert "invalid case id" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.process
def test_show_json_is_the_whole_case(tmp_path: Path):
    Archive(tmp_path).save(make_case())
    result = run_casekit("show", "demo", "--json", "-", "--archive", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["observations"]["pre"]["sites"][0]["gb_id"] == "GB0124"
    assert load_case(tmp_path / "demo.toml").id == "demo"
