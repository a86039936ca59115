"""The bisection report: what changed is replay's classification, and the casekit.bisect/1 document.

The cross-check drives both the real `replay.run_target` and the real
`bisect_releases` through a `Runner` that hands back raw probe results
recorded for real on torch 2.5.1 and 2.13.0 (tests/fixtures/probe): a fake
only at the runner interface, so replay and bisect pair the same two runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casekit.bisect.engine import CacheSettings
from casekit.bisect.predicates import CommitPredicate, Direction, Predicate
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases
from casekit.bisect.report import (
    BISECT_SCHEMA,
    read_report,
    render_text,
    report_from_json,
    report_to_json,
    write_report,
)
from casekit.bundle import sha256_text
from casekit.errors import BisectError
from casekit.model import Case, ScriptSource
from casekit.observe import interpret
from casekit.replay.run import ReplayOptions, run_target
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn, Runner, TargetSpec
from tests.bisect_fakes import HISTORY, VERSIONS, FakeReplay, make_case, no_runner

from .conftest import FIXTURES

RELEASES = ["2.5.1", "2.13.0"]
SCRIPTS = ["breaks", "data_branch", "deepcopy_state", "module_skip"]


def raw_result(release: str, name: str) -> dict[str, object]:
    result: dict[str, object] = json.loads((FIXTURES / "probe" / release / f"{name}.json").read_text())
    return result


class RecordedRunner(Runner):
    """The Runner interface over recorded real probe results: a job gets its script's result on the spec's torch."""

    name = "recorded"

    def prepare(self, progress: ProgressFn) -> None:
        pass

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        release = self.spec.torch or "?"
        results = {job.id: raw_result(release, Path(job.script).stem) for job in jobs}
        return ProbeBatchResult(environment={"torch": release}, results=results)


def captured_on_251(name: str) -> Case:
    source = (FIXTURES / "scripts" / f"{name}.py").read_text()
    raw = raw_result("2.5.1", name)
    observation = interpret(raw, str(raw["script"]), f"{name}.py", source)
    return Case(
        name.replace("_", "-"),
        name,
        ScriptSource(f"{name}.py", sha256_text(source), source),
        observations={"pre": observation},
    )


@pytest.mark.parametrize("name", SCRIPTS)
def test_bisect_and_replay_give_the_same_classes_for_the_same_two_runs(name: str) -> None:
    case = captured_on_251(name)
    replayed = run_target(
        TargetSpec(runner="venv", torch="2.13.0"),
        [case],
        ReplayOptions(record=False, verify_rollback=False),
        RecordedRunner,
        lambda m: None,
    ).results[0]
    config = ReleaseBisect("2.5.1", "2.13.0", versions=RELEASES, cache=CacheSettings(None))
    report = bisect_releases(case, config, ReleaseSeams(make_runner=RecordedRunner))
    replay_classes = [
        (which, p.site_class.value, p.site.where(), p.note) for which, s in replayed.scripts.items() for p in s.sites
    ]
    if replayed.verdict == "unchanged":
        assert report.direction is Direction.NOTHING and report.changed is None
        return
    assert report.first_bad == "2.13.0" and report.changed is not None
    assert [(s.script, s.site_class, s.where, s.note) for s in report.changed.sites] == replay_classes
    assert (report.changed.verdict, report.changed.reasons) == (replayed.verdict, replayed.reasons)


def test_a_break_that_went_below_the_same_line_is_moved_in_both() -> None:
    """deepcopy_state: 2.5.1 breaks at the script's deepcopy call, 2.13.0 inside copy.py below it."""
    report = bisect_releases(
        captured_on_251("deepcopy_state"),
        ReleaseBisect("2.5.1", "2.13.0", versions=RELEASES, cache=CacheSettings(None)),
        ReleaseSeams(make_runner=RecordedRunner),
    )
    assert report.changed is not None
    assert [s.site_class for s in report.changed.sites] == ["moved"]
    assert report.changed.reasons == ["pre: 1 moved"] and report.direction is Direction.REGRESSION


# ------------------------------------------------------------------ which way


@pytest.mark.parametrize(
    ("predicate", "good", "bad", "direction"),
    [
        ("verdict", "unchanged", "fix_broken", Direction.REGRESSION),
        ("verdict", "unchanged", "improved", Direction.FIX),
        ("verdict", "fix_broken", "unchanged", Direction.FIX),
        ("verdict", "unchanged", "unchanged", Direction.NOTHING),
        (("site", "a.py:3"), "persists", "gone", Direction.FIX),
        (("site", "a.py:3"), "absent", "new", Direction.REGRESSION),
        (("site", "a.py:3"), "persists", "moved", Direction.CHANGE),
        (("status", "post"), "ok", "compile_error", Direction.REGRESSION),
        (("status", "pre"), "eager_failed", "ok", Direction.FIX),
        ("post-holds", "broken", "holds", Direction.FIX),
    ],
)
def test_direction_of_a_release_change(predicate, good: str, bad: str, direction: Direction) -> None:  # type: ignore[no-untyped-def]
    assert Predicate.parse(predicate).direction(good, bad) is direction


@pytest.mark.parametrize(
    ("good", "bad", "direction"),
    [
        ("no-break", "break", Direction.REGRESSION),
        ("break", "no-break", Direction.FIX),
        ("2 graph break(s)", "1 graph break(s)", Direction.FIX),
        ("1/2 recorded break(s)", "2/2 recorded break(s)", Direction.REGRESSION),
        ("0 graph break(s)", "compile_error", Direction.REGRESSION),
        ("bad", "good", Direction.FIX),
    ],
)
def test_direction_of_a_commit_change(good: str, bad: str, direction: Direction) -> None:
    assert CommitPredicate().direction(good, bad) is direction


# ------------------------------------------------------------------ the casekit.bisect/1 document


def test_the_document_round_trips_through_its_schema(tmp_path: Path) -> None:
    config = ReleaseBisect("2.5.1", "2.10.0", versions=VERSIONS, cache=CacheSettings(None))
    report = bisect_releases(make_case(), config, ReleaseSeams(run_target=FakeReplay(HISTORY), make_runner=no_runner))
    write_report(report, tmp_path / "deep" / "r.json")
    data = json.loads((tmp_path / "deep" / "r.json").read_text())
    assert data["schema"] == BISECT_SCHEMA and data["baseline"] == "2.5.1"
    back = read_report(tmp_path / "deep" / "r.json")
    assert report_to_json(back) == data
    assert render_text(back) == render_text(report)
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["r.json"], "temporary files left behind"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema="casekit.bisect/0"), r"schema: 'casekit.bisect/1' was expected"),
        (lambda d: d.pop("first_bad"), "'first_bad' is a required property"),
        (lambda d: d.update(result="maybe"), "result: 'maybe' is not one of"),
        (lambda d: d["steps"][0].update(cached="yes"), "steps/0/cached: 'yes' is not of type 'boolean'"),
    ],
)
def test_a_malformed_document_is_one_clear_error(change, message: str) -> None:  # type: ignore[no-untyped-def]
    config = ReleaseBisect("2.5.1", "2.10.0", versions=VERSIONS, cache=CacheSettings(None))
    data = report_to_json(
        bisect_releases(make_case(), config, ReleaseSeams(run_target=FakeReplay(HISTORY), make_runner=no_runner))
    )
    change(data)
    with pytest.raises(BisectError, match=message):
        report_from_json(data, "r.json")


def test_an_unreadable_document_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text("{oops")
    with pytest.raises(BisectError, match="cannot read a casekit.bisect/1 document"):
        read_report(tmp_path / "r.json")
