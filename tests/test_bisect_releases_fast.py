"""Bisection over torch releases with `run_target` faked at its interface.

The search itself is tested in test_bisect_search.py. Here `run_target`
returns one canned observation set per torch version, classified for real,
so every path of `bisect_releases` runs in milliseconds: predicates, unknown
targets, the end checks, the disk cache, the report. Real torch runs are in
test_bisect_releases.py and test_bisect_cli.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casekit.bisect.commits import split_probe_command
from casekit.bisect.engine import BisectEndUnknown, CacheSettings, observation_from_record, observation_record
from casekit.bisect.predicates import CommitPredicate, Direction, Predicate, parse_location
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases, version_target_key
from casekit.bisect.report import BISECT_SCHEMA, report_to_json
from casekit.bisect.search import UNKNOWN
from casekit.bundle import sha256_text
from casekit.errors import BisectError, CasekitError
from casekit.model import (
    Case,
    FallbackFrame,
    Frame,
    OutputCheck,
    Recompile,
    ScriptObservation,
    ScriptSource,
    ScriptStatus,
    Site,
    SiteKind,
)
from casekit.runners.interface import ProbeJob

from .bisect_fakes import HISTORY, PRE, VERSIONS, FakeReplay, item_break, make_case, no_runner, observed


def run(case: Case, tmp_path: Path, fake: FakeReplay, **options):  # type: ignore[no-untyped-def]
    """bisect_releases over VERSIONS (2.5.1 good, 2.10.0 bad) with the fake replay and a cache in tmp_path."""
    options.setdefault("versions", VERSIONS)
    options["predicate"] = Predicate.parse(options.get("predicate", "verdict"))
    use_cache = options.pop("use_cache", True)
    cache = CacheSettings(tmp_path / "cache.json" if use_cache else None, options.pop("retry_unknown", False))
    list_versions = options.pop("list_versions", None)
    config = ReleaseBisect(options.pop("good", "2.5.1"), options.pop("bad", "2.10.0"), cache=cache, **options)
    seams = ReleaseSeams(run_target=fake, make_runner=no_runner)
    if list_versions is not None:
        seams = ReleaseSeams(run_target=fake, make_runner=no_runner, list_versions=list_versions)
    return bisect_releases(case, config, seams)


def test_finds_the_release_where_the_verdict_changes(tmp_path: Path) -> None:
    fake = FakeReplay(HISTORY)
    report = run(make_case(), tmp_path, fake)
    assert (report.last_good, report.first_bad, report.ambiguous) == ("2.7.1", "2.8.0", [])
    assert report.good_outcome == "unchanged" and report.bad_outcome == "fix_broken"
    assert fake.versions[:2] == ["2.5.1", "2.10.0"], "both ends are checked first"
    assert len(fake.versions) == len(set(fake.versions)) == len(report.steps) == report.evaluated
    assert [s.target for s in report.steps] == fake.versions
    assert report.candidates == VERSIONS
    assert report.reproduce == "casekit replay --case item-case --torch 2.8.0 --no-record"
    assert report.compare_url == "https://github.com/pytorch/pytorch/compare/v2.7.1...v2.8.0"
    assert report.direction is Direction.REGRESSION and report.warnings == []
    assert report.changed is not None and report.changed.baseline == "2.5.1", "one baseline: the good end"
    assert report.changed.lines == [
        "pre-fix: moved: repro.py:6 in f: Tensor.item (from repro.py:5 (f) to repro.py:6 (f), 1 line(s) away in the same function)",
        "post-fix: ok on 2.5.1 -> compile_error on 2.8.0: compiled run: RuntimeError: boom",
        "post-fix: 1 -> 0 graph(s)",
    ]
    assert report.changed.verdict == "fix_broken"
    assert report.changed.reasons[0] == "pre: 1 moved", "the verdict counts what the change list shows"


def test_second_run_reads_everything_from_the_cache_whatever_the_predicate(tmp_path: Path) -> None:
    first = run(make_case(), tmp_path, FakeReplay(HISTORY))
    again = FakeReplay(HISTORY)
    second = run(make_case(), tmp_path, again)
    assert again.specs == [] and second.evaluated == 0 and second.from_cache == len(second.steps)
    assert (second.first_bad, [s.outcome for s in second.steps]) == (first.first_bad, [s.outcome for s in first.steps])
    # the cache holds observations, not outcomes: another predicate reuses them
    by_site = run(make_case(), tmp_path, again, predicate=("site", "repro.py:5"))
    assert again.specs == [] and by_site.first_bad == "2.8.0"
    assert (by_site.good_outcome, by_site.bad_outcome) == ("persists", "moved")
    cache = json.loads((tmp_path / "cache.json").read_text())
    assert cache["schema"] == "casekit.bisect-cache/1"
    [(subject, targets)] = cache["results"].items()
    assert subject.startswith("case:") and set(targets) <= {f"venv:{v}" for v in VERSIONS}


def test_a_cached_record_that_cannot_be_read_back_is_run_again(tmp_path: Path) -> None:
    run(make_case(), tmp_path, FakeReplay(HISTORY))
    path = tmp_path / "cache.json"
    cache = json.loads(path.read_text())
    [targets] = cache["results"].values()
    record = json.loads(targets["venv:2.5.1"]["outcome"])
    record["observations"]["pre"]["status"] = "from-a-future-casekit"
    targets["venv:2.5.1"]["outcome"] = json.dumps(record)
    path.write_text(json.dumps(cache))
    fake = FakeReplay(HISTORY)
    report = run(make_case(), tmp_path, fake)
    assert fake.versions == ["2.5.1"] and report.first_bad == "2.8.0" and report.evaluated == 1


def test_editing_the_case_scripts_invalidates_its_cache(tmp_path: Path) -> None:
    run(make_case(), tmp_path, FakeReplay(HISTORY))
    edited = make_case()
    source = PRE + "# edited\n"
    edited.pre = ScriptSource("repro.py", sha256_text(source), source)
    fake = FakeReplay(HISTORY)
    run(edited, tmp_path, fake)
    assert fake.specs, "new case content, new cache key"


@pytest.mark.parametrize(
    ("predicate", "good", "bad", "first_bad"),
    [
        (("status", "post"), "ok", "compile_error", "2.8.0"),
        ("post-holds", "holds", "broken", "2.8.0"),
        (("site", "repro.py:6"), "absent", "moved", "2.8.0"),
        ("verdict", "unchanged", "fix_broken", "2.8.0"),
    ],
)
def test_predicates(tmp_path: Path, predicate, good: str, bad: str, first_bad: str) -> None:  # type: ignore[no-untyped-def]
    report = run(make_case(), tmp_path, FakeReplay(HISTORY), predicate=predicate)
    assert (report.good_outcome, report.bad_outcome, report.first_bad) == (good, bad, first_bad)


def test_ends_that_agree_say_nothing_changed(tmp_path: Path) -> None:
    """2.7.1 rewords the break (same place, same category): still 'unchanged', like 2.5.1 -- an answer, not an error."""
    fake = FakeReplay(HISTORY)
    report = run(make_case(), tmp_path, fake, bad="2.7.1")
    assert fake.versions == ["2.5.1", "2.7.1"], "only the ends are run"
    assert (report.first_bad, report.last_good, report.changed, report.reproduce) == (None, None, None, None)
    assert report.direction is Direction.NOTHING and not report.exact
    assert report_to_json(report)["first_bad"] is None


def test_unbuildable_targets_are_stepped_around_and_leave_the_range_ambiguous(tmp_path: Path) -> None:
    fake = FakeReplay(HISTORY, broken=frozenset({"2.8.0", "2.7.1"}))
    report = run(make_case(), tmp_path, fake)
    assert (report.last_good, report.first_bad) == ("2.6.0", "2.9.1")
    assert report.ambiguous == ["2.7.1", "2.8.0"] and not report.exact
    unknown = [s for s in report.steps if s.outcome == "unknown"]
    assert {s.target for s in unknown} == {"2.7.1", "2.8.0"}
    assert all("cannot install torch" in s.detail for s in unknown)
    # unknowns are remembered (a failed build usually fails again) unless asked to retry
    again = FakeReplay(HISTORY)
    run(make_case(), tmp_path, again)
    assert again.specs == []
    retried = FakeReplay(HISTORY)
    report = run(make_case(), tmp_path, retried, retry_unknown=True)
    assert sorted(retried.versions) == ["2.7.1", "2.8.0"] and report.first_bad == "2.8.0" and report.exact


def test_an_end_that_cannot_be_built_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(
        BisectEndUnknown,
        match="the good end 2.5.1 could not be evaluated: environment failed: cannot install torch 2.5.1",
    ):
        run(make_case(), tmp_path, FakeReplay(HISTORY, broken=frozenset({"2.5.1"})))


def test_python_runner_maps_versions_to_interpreters(tmp_path: Path) -> None:
    pythons = {"2.5.1": "/opt/t251/bin/python", "2.9.1": "/opt/t291/bin/python", "2.10.0": "/opt/t210/bin/python"}
    fake = FakeReplay(HISTORY)
    report = run(make_case(), tmp_path, fake, runner="python", pythons=pythons, versions=None)
    assert report.candidates == ["2.5.1", "2.9.1", "2.10.0"], (
        "without --versions, the mapped versions are the candidates"
    )
    assert report.first_bad == "2.9.1"
    assert {(s.runner, s.torch, s.python) for s in fake.specs} == {("python", v, p) for v, p in pythons.items()}
    assert report.reproduce == "casekit replay --case item-case --python /opt/t291/bin/python --no-record"
    # a listed version with no interpreter is unknown, never run, and not cached as such
    fake = FakeReplay(HISTORY)
    report = run(make_case(), tmp_path, fake, runner="python", pythons=pythons, versions=["2.5.1", "2.8.0", "2.10.0"])
    assert report.ambiguous == ["2.8.0"] and "2.8.0" not in fake.versions
    [step] = [s for s in report.steps if s.target == "2.8.0"]
    assert (step.outcome, step.ran, step.cached) == ("unknown", False, False)
    assert "--python-for 2.8.0=PATH" in step.detail


def test_candidates_come_from_the_index_when_not_given(tmp_path: Path) -> None:
    asked = {}

    def list_versions(package: str, *, pre: bool = False, index_url: str | None = None) -> list[str]:
        asked.update(package=package, pre=pre, index_url=index_url)
        return ["2.4.0", *VERSIONS, "2.11.0"]

    report = run(make_case(), tmp_path, FakeReplay(HISTORY), versions=None, list_versions=list_versions)
    assert report.candidates == VERSIONS and asked == {"package": "torch", "pre": False, "index_url": None}


def test_no_cache_writes_nothing(tmp_path: Path) -> None:
    report = run(make_case(), tmp_path, FakeReplay(HISTORY), use_cache=False)
    assert report.cache_path is None and not (tmp_path / "cache.json").exists()


def test_predicates_that_need_a_post_fix(tmp_path: Path) -> None:
    case = make_case()
    case.post = None
    with pytest.raises(BisectError, match="has no post-fix script"):
        run(case, tmp_path, FakeReplay(HISTORY), predicate="post-holds")
    with pytest.raises(BisectError, match="FILE:LINE"):
        Predicate.parse(("site", "repro.py"))
    with pytest.raises(BisectError, match="pre or post"):
        Predicate.parse(("status", "both"))
    with pytest.raises(BisectError, match="unknown predicate"):
        Predicate.parse("flaky")


def test_report_json(tmp_path: Path) -> None:
    data = report_to_json(run(make_case(), tmp_path, FakeReplay(HISTORY)))
    assert data["schema"] == BISECT_SCHEMA and data["kind"] == "versions"
    assert data["searched"] == {"from": "2.5.1", "to": "2.10.0", "candidates": VERSIONS}
    assert (data["last_good"], data["first_bad"], data["exact"]) == ("2.7.1", "2.8.0", True)
    assert data["steps"][0]["target"] == "2.5.1" and data["steps"][0]["ran"] is True
    json.dumps(data)


def test_cached_observation_round_trips_everything_classification_reads() -> None:
    site = Site(
        "torch/nn/modules/module.py",
        1740,
        "_call_impl",
        "return f(*a)",
        "GB0124",
        "Tensor.item",
        "GB0124",
        call_site=Frame("repro.py", 9, "forward", "y = self.m(x)"),
        stack=[Frame("repro.py", 9, "forward")],
        kind=SiteKind.SKIP,
        excerpt="long log text",
    )
    original = ScriptObservation(
        status=ScriptStatus.MISMATCH,
        detail="differs",
        graphs=3,
        sites=[site],
        fallback_frames=[FallbackFrame("g", "repro.py", 3, "skip")],
        recompiles=[Recompile("f", "repro.py", 4, ["size"])],
        check=OutputCheck(compared=2, allclose=False, max_abs=0.5),
        log_excerpt="x" * 5000,
        stdout_tail="out",
    )
    record = json.loads(json.dumps(observation_record(original)))
    back = observation_from_record(record)
    assert back is not None
    assert back.sites[0].call_site == site.call_site and back.sites[0].kind == "skip" and back.sites[0].excerpt == ""
    assert (back.status, back.graphs, back.check, back.fallback_frames, back.recompiles) == (
        original.status,
        original.graphs,
        original.check,
        original.fallback_frames,
        original.recompiles,
    )
    assert back.log_excerpt == "" and "log_excerpt" not in record
    assert observation_from_record({"status": "no-such-status"}) is None


def test_target_keys() -> None:
    assert version_target_key("venv", "2.5.1") == "venv:2.5.1"
    assert version_target_key("docker", "2.13.0", cuda="cu124") == "docker:2.13.0+cu124"
    assert version_target_key("python", "2.5.1", python="/p/python") == "python:2.5.1@/p/python"


# ------------------------------------------------------------------ commit mode, pure parts


def test_split_probe_command() -> None:
    assert split_probe_command(["python", "model.py"]) == ("python", "model.py", [])
    assert split_probe_command(["/opt/v/bin/python3.11", "src/train.py", "--steps", "2"]) == (
        "/opt/v/bin/python3.11",
        "src/train.py",
        ["--steps", "2"],
    )
    assert split_probe_command(["train.py"]) == (None, "train.py", [])
    assert split_probe_command(["uv", "run", "train.py"]) == (None, "train.py", [])
    with pytest.raises(BisectError, match="pass --exit-code"):
        split_probe_command(["make", "test"])


def judged(observation: ScriptObservation, *, site: str | None = None, case: Case | None = None):  # type: ignore[no-untyped-def]
    return CommitPredicate(site=site, case=case).outcome(observation)


def test_commit_outcomes() -> None:
    broken_eager = observed(status=ScriptStatus.EAGER_FAILED, detail="eager baseline: ImportError")
    assert judged(broken_eager, site="model.py:7")[0] is UNKNOWN
    crash = observed(status=ScriptStatus.COMPILE_ERROR, detail="compiled run: boom")
    assert judged(crash, site="model.py:7") == ("compile_error", "compiled run: boom")
    at_7 = observed(Site("model.py", 7, "step", "print(z)", "legacy:print", "print"))
    assert judged(at_7, site="model.py:7")[0] == "break"
    assert judged(at_7, site="./model.py:8")[0] == "no-break"
    assert judged(at_7, site="src/model.py:7")[0] == "break", "a path suffix names the same file"
    assert judged(at_7)[0] == "1 graph break(s)"
    case = make_case()
    assert judged(at_7, case=case)[0] == "0/1 recorded break(s)"
    assert judged(observed(item_break(line=30)), case=case)[0] == "1/1 recorded break(s)"


def test_parse_location() -> None:
    assert parse_location("src/model.py:12") == ("src/model.py", 12)
    for bad in ("model.py", ":3", "model.py:x"):
        with pytest.raises(CasekitError):
            parse_location(bad)


def test_a_tree_job_names_its_script_inside_the_tree(tmp_path: Path) -> None:
    from casekit.runners.batch import RequestPlaces, request_document

    (tmp_path / "src").mkdir()
    script = tmp_path / "src" / "model.py"
    job = ProbeJob(id="commit", script=script, tree=tmp_path, argv=("--n", "1"))
    request = request_document([job], RequestPlaces.one_folder("/batch"))["jobs"][0]
    assert request["script"] == "/batch/jobs/commit/src/model.py" and request["job_dir"] == "/batch/jobs/commit"
    assert request["tree"] is True and request["argv"] == ["--n", "1"]
