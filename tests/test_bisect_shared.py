"""One bisection for many cases, with `run_target` faked at its interface (real runs: test_bisect_shared_live.py).

Each case must get the report its own bisection gives, while each release is
replayed in one round for every case that needs it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from casekit.bisect.ahead import BuildAhead
from casekit.bisect.engine import CacheSettings
from casekit.bisect.predicates import Predicate, PredicateKind
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases
from casekit.bisect.report import multi_report_to_json, render_shared_text, validate_multi_document
from casekit.bisect.shared import Ahead, bisect_releases_many
from casekit.bundle import sha256_text
from casekit.classify import classify_case
from casekit.model import Case, ScriptObservation
from casekit.replay.run import ReplayOptions, TargetRun
from casekit.runners.interface import ProgressFn, RunnerFactory, TargetSpec
from casekit.runners.registry import label
from tests.test_bisect_releases_fast import HISTORY, VERSIONS, make_case, no_runner

MORE = [f"2.{minor}.0" for minor in range(11, 16)]
ALL = VERSIONS + MORE
LATE = {**HISTORY, **{v: HISTORY["2.10.0"] for v in MORE}}
NEVER = {v: HISTORY["2.5.1"] for v in ALL}
EARLY = {**{v: HISTORY["2.10.0"] for v in ALL}, "2.5.1": HISTORY["2.5.1"]}
SHIFTED = {v: HISTORY["2.5.1"] if i < 9 else HISTORY["2.10.0"] for i, v in enumerate(ALL)}


def case_named(name: str) -> Case:
    """A case of its own content (the cache keys cases by content: same scripts, same records)."""
    case = make_case()
    source = case.pre.source + f"# {name}\n"
    pre = dataclasses.replace(case.pre, source=source, sha256=sha256_text(source))
    return dataclasses.replace(case, id=name, title=name, pre=pre)


class PerCaseReplay:
    """`run_target` at its interface: each case has its own canned history; every call is logged."""

    def __init__(
        self, histories: dict[str, dict[str, dict[str, ScriptObservation]]], broken: frozenset[str] = frozenset()
    ) -> None:
        self.histories = histories
        self.broken = broken
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(
        self,
        spec: TargetSpec,
        cases: list[Case],
        options: ReplayOptions,
        make_runner: RunnerFactory,
        progress: ProgressFn,
    ) -> TargetRun:
        version = spec.torch or "?"
        self.calls.append((version, [case.id for case in cases]))
        run = TargetRun(spec=spec, label=label(spec), environment={"torch": version})
        if version in self.broken:
            run.error = f"cannot install torch {version}"
            return run
        run.results = [classify_case(c, label(spec), self.histories[c.id][version]) for c in cases]
        return run


HISTORIES = {"late": LATE, "never": NEVER, "early": EARLY, "shifted": SHIFTED}


def config(tmp_path: Path, name: str | None = "cache.json", **options) -> ReleaseBisect:  # type: ignore[no-untyped-def]
    return ReleaseBisect(
        "2.5.1", "2.15.0", versions=ALL, cache=CacheSettings(tmp_path / name if name else None), **options
    )


@pytest.mark.parametrize("broken", [frozenset(), frozenset({"2.9.1", "2.12.0"}), frozenset({"2.15.0"})])
def test_each_case_gets_its_single_bisection_report(tmp_path: Path, broken: frozenset[str]) -> None:
    cases = [case_named(name) for name in HISTORIES]
    shared_fake = PerCaseReplay(HISTORIES, broken)
    shared = bisect_releases_many(cases, config(tmp_path), ReleaseSeams(run_target=shared_fake, make_runner=no_runner))
    single_calls = 0
    for case in cases:
        fake = PerCaseReplay(HISTORIES, broken)
        seams = ReleaseSeams(run_target=fake, make_runner=no_runner)
        try:
            alone = bisect_releases(case, config(tmp_path, f"{case.id}.json"), seams)
        except Exception as error:  # an unknown end: the shared bisection reports it for that case only
            assert "could not be evaluated" in str(error) and case.id in shared.errors
            single_calls += len(fake.calls)
            continue
        single_calls += len(fake.calls)
        together = shared.reports[case.id]
        assert (together.last_good, together.first_bad, together.ambiguous) == (
            alone.last_good,
            alone.first_bad,
            alone.ambiguous,
        )
        assert [(s.target, s.outcome) for s in together.steps] == [(s.target, s.outcome) for s in alone.steps]
        assert together.direction == alone.direction and together.reproduce == alone.reproduce
    versions = [version for version, _ in shared_fake.calls]
    assert len(versions) == len(set(versions)), "each release is replayed in one round"
    assert len(versions) < single_calls
    assert shared.stats.batches == len(shared_fake.calls)


def test_a_second_shared_run_reads_everything_from_the_cache(tmp_path: Path) -> None:
    cases = [case_named(name) for name in HISTORIES]
    first = bisect_releases_many(
        cases, config(tmp_path), ReleaseSeams(run_target=PerCaseReplay(HISTORIES), make_runner=no_runner)
    )
    again = PerCaseReplay(HISTORIES)
    second = bisect_releases_many(cases, config(tmp_path), ReleaseSeams(run_target=again, make_runner=no_runner))
    assert again.calls == [] and second.stats.batches == 0
    assert {k: r.first_bad for k, r in second.reports.items()} == {k: r.first_bad for k, r in first.reports.items()}
    # and a single bisection of one of them reads the same cache entries
    alone_fake = PerCaseReplay(HISTORIES)
    alone = bisect_releases(cases[0], config(tmp_path), ReleaseSeams(run_target=alone_fake, make_runner=no_runner))
    assert alone_fake.calls == [] and alone.first_bad == first.reports[cases[0].id].first_bad


def test_a_case_the_predicate_cannot_follow_is_reported_not_fatal(tmp_path: Path) -> None:
    no_post = dataclasses.replace(case_named("no-post"), post=None)
    fake = PerCaseReplay({"late": LATE, "no-post": LATE})
    shared = bisect_releases_many(
        [case_named("late"), no_post],
        config(tmp_path, predicate=Predicate(PredicateKind.POST_HOLDS)),
        ReleaseSeams(run_target=fake, make_runner=no_runner),
    )
    assert "no post-fix" in shared.errors["no-post"] and shared.reports["late"].first_bad == "2.8.0"
    assert all(ids == ["late"] for _, ids in fake.calls)


def test_multi_document_wraps_single_documents(tmp_path: Path) -> None:
    cases = [case_named(name) for name in HISTORIES]
    shared = bisect_releases_many(
        cases, config(tmp_path, None), ReleaseSeams(run_target=PerCaseReplay(HISTORIES), make_runner=no_runner)
    )
    document = multi_report_to_json(shared)
    validate_multi_document(document, "test")
    assert [doc["subject"] for doc in document["reports"]] == ["late", "never", "early", "shifted"]
    assert document["summary"]["batches"] == shared.stats.batches
    text = render_shared_text(shared)
    assert "probe batch(es)" in text and text.count("searched versions") == 4


def test_build_ahead_builds_what_is_wanted_once_and_drops_what_is_not() -> None:
    built: list[str] = []
    gate = threading.Event()

    def prepare(version: str) -> None:
        if version == "slow":
            gate.wait(5)
        built.append(version)

    ahead = BuildAhead(prepare, limit=2)
    ahead.want(["slow", "b", "c"])  # only two are kept
    deadline = time.monotonic() + 5
    while ahead.building() != "slow" and time.monotonic() < deadline:
        time.sleep(0.01)
    ahead.want(["d"])  # b is no longer wanted: it will not start
    ahead.claim("d")  # ... and the search builds d itself
    gate.set()
    ahead.close()  # the build in progress finishes
    assert built == ["slow"]
    assert [c for c, _ in ahead.stats.built] == ["slow"]


def test_build_ahead_keeps_disk_free_and_survives_failures() -> None:
    def prepare(version: str) -> None:
        raise RuntimeError("no such wheel")

    full = BuildAhead(lambda v: None, free_bytes=lambda: 1, min_free=10)
    full.want(["a"])
    failing = BuildAhead(prepare)
    failing.want(["x"])
    for ahead in (full, failing):
        deadline = time.monotonic() + 5
        while (
            ahead.building() is None
            and not (ahead.stats.skipped_for_disk or ahead.stats.failed)
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        ahead.close()
    assert full.stats.skipped_for_disk == ["a"] and failing.stats.failed == ["x"]


def preparing_seams() -> tuple[list[str], PerCaseReplay, ReleaseSeams]:
    """Seams whose runners record each release they prepare, and whose runs take a while:
    (releases prepared, in order; the replay; the seams)."""
    prepared: list[str] = []

    class Preparing:
        def __init__(self, spec: TargetSpec) -> None:
            self.spec = spec

        def prepare(self, progress: ProgressFn) -> None:
            prepared.append(self.spec.torch or "?")

    fake = PerCaseReplay(HISTORIES)

    def slow_replay(*args):  # type: ignore[no-untyped-def]
        time.sleep(0.3)  # a release's run: time for the builder to start the next one
        return fake(*args)

    return prepared, fake, ReleaseSeams(run_target=slow_replay, make_runner=Preparing)  # type: ignore[arg-type]


def test_shared_bisection_builds_the_next_candidates_ahead(tmp_path: Path) -> None:
    prepared, fake, seams = preparing_seams()
    shared = bisect_releases_many(
        [case_named(n) for n in HISTORIES],
        config(tmp_path, runner="venv"),
        seams,
        Ahead(limit=2, min_free_gib=0, ends_together=False),
    )
    evaluated = {version for version, _ in fake.calls}
    assert prepared and set(prepared) <= set(ALL)
    assert "2.15.0" in prepared, "the bad end is built while the good end runs"
    assert len(prepared) == len(set(prepared))
    assert {c for c, _ in shared.stats.ahead.built} == set(prepared)
    assert len(evaluated & set(prepared)) >= 1


def test_cli_bisects_several_cases_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from casekit.archive.store import Archive
    from casekit.bisect import releases
    from tests.test_bisect_cli import invoke

    archive = tmp_path / "cases"
    for name in HISTORIES:
        Archive(archive).save(case_named(name))
    fake = PerCaseReplay(HISTORIES)
    monkeypatch.setattr(releases, "run_target", fake)
    common = ["--good", "2.5.1", "--bad", "2.15.0", "--versions", ",".join(ALL), "--archive", archive, "--ahead", "0"]
    code, output, error = invoke(
        "bisect", "--all", *common, "--cache", tmp_path / "c.json", "--json", tmp_path / "m.json"
    )
    assert code == 0, (output, error)
    document = json.loads((tmp_path / "m.json").read_text())
    assert document["schema"] == "casekit.bisect-many/1"
    assert {doc["subject"]: doc["first_bad"] for doc in document["reports"]} == {
        "early": "2.6.0",
        "late": "2.8.0",
        "never": None,
        "shifted": "2.14.0",
    }
    assert f"4 case(s): {len(fake.calls)} release(s) evaluated, {len(fake.calls)} probe batch(es) run" in output
    code, output, error = invoke("bisect", "late", "early", *common, "--no-cache")
    assert code == 0 and output.count("searched versions") == 2, output
    code, _, error = invoke("bisect", "late", "--all", *common, "--no-cache")
    assert code != 0 and "not both" in str(error)
    code, _, error = invoke("bisect", "late", "early", *common, "--no-cache", "--html", tmp_path / "x.html")
    assert code != 0 and "--html draws one bisection" in str(error)


def test_the_bad_end_is_probed_beside_the_good_end(tmp_path: Path) -> None:
    fake = PerCaseReplay(HISTORIES)
    spans: dict[str, tuple[float, float]] = {}

    def slow_replay(spec, cases, *rest):  # type: ignore[no-untyped-def]
        begun = time.monotonic()
        time.sleep(0.5)
        run = fake(spec, cases, *rest)
        spans[spec.torch or "?"] = (begun, time.monotonic())
        return run

    cases = [case_named(n) for n in HISTORIES]
    shared = bisect_releases_many(
        cases, config(tmp_path), ReleaseSeams(run_target=slow_replay, make_runner=no_runner), Ahead(limit=0)
    )
    (good_start, good_end), (bad_start, bad_end) = spans["2.5.1"], spans["2.15.0"]
    assert bad_start < good_end and good_start < bad_end, "the two ends' probes overlap"
    versions = [version for version, _ in fake.calls]
    assert len(versions) == len(set(versions)) == shared.stats.batches
    for case in cases:  # and each case still reads its steps in the single bisection's order
        alone = bisect_releases(
            case, config(tmp_path, None), ReleaseSeams(run_target=PerCaseReplay(HISTORIES), make_runner=no_runner)
        )
        assert [(s.target, s.outcome) for s in shared.reports[case.id].steps] == [
            (s.target, s.outcome) for s in alone.steps
        ]


def test_a_single_bisection_builds_both_halves_of_the_next_split_ahead(tmp_path: Path) -> None:
    from casekit.bisect.ahead import Ahead as AheadOptions

    prepared, fake, seams = preparing_seams()
    case = case_named("late")
    report = bisect_releases(case, config(tmp_path, None, ahead=AheadOptions(limit=2, min_free_gib=0)), seams)
    alone = bisect_releases(case, config(tmp_path, None), ReleaseSeams(run_target=fake, make_runner=no_runner))
    assert report.first_bad == alone.first_bad == "2.8.0"
    assert [s.target for s in report.steps] == [s.target for s in alone.steps]
    # while the good end ran: the bad end; while the median ran: the medians of both halves
    assert prepared[0] == "2.15.0", prepared
    ran = [s.target for s in report.steps]
    assert len(prepared) == len(set(prepared)) and not set(prepared) & {ran[0]}
    assert set(ran[2:]) & set(prepared), "later steps find their env already prepared"
