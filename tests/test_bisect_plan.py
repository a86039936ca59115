"""What `casekit bisect` decides around the search, in-process (`casekit.bisect.plan`), with `run_target`
faked at its interface: one case or several, --ahead's default, the --html rule, the documents and their
write failures, the exit code, and what Ctrl-C leaves. The command line itself: test_bisect_cli.py."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bisect.engine import CacheSettings
from casekit.bisect.plan import BisectRequest, Outputs, predicate_for, run_bisect
from casekit.bisect.releases import ReleaseSeams
from casekit.bisect.report import BISECT_SCHEMA, MULTI_SCHEMA
from casekit.errors import BisectError, CasekitError, Stopped
from casekit.outcome import ExitCode
from tests.bisect_fakes import HISTORY, VERSIONS, FakeReplay, make_case, no_runner


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    store = Archive(tmp_path / "cases")
    store.save(make_case())
    return store


def request(tmp_path: Path, *ids: str, **options: object) -> BisectRequest:
    options.setdefault("versions", ",".join(VERSIONS))
    options.setdefault("cache", CacheSettings(tmp_path / "cache.json"))
    return BisectRequest("2.5.1", "2.10.0", case_ids=ids or ("item-case",), **options)  # type: ignore[arg-type]


def seams(fake: FakeReplay) -> ReleaseSeams:
    return ReleaseSeams(run_target=fake, make_runner=no_runner)


def test_one_case_or_several_and_how_far_each_builds_ahead(tmp_path: Path) -> None:
    one, two = request(tmp_path, "a"), request(tmp_path, "a", "b")
    assert (one.several, one.ahead_limit) == (False, 0)
    assert (two.several, two.ahead_limit) == (True, 2)
    assert BisectRequest("2.5.1", "2.10.0", all_cases=True).several
    assert request(tmp_path, "a", "a").several is False  # a repeated id is one case
    assert request(tmp_path, "a", ahead=3).release_config().ahead.limit == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"case_ids": ()}, "name the case(s) to bisect, or pass --all"),
        ({"all_cases": True}, "give case ids or --all, not both"),
        ({"ahead": -1}, "--ahead takes 0 or more"),
    ],
)
def test_requests_that_cannot_run_are_refused_before_anything_runs(options: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"case_ids": ("a",), **options}
    with pytest.raises(BisectError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BisectRequest("2.5.1", "2.10.0", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("2.13.0", "2.5.1", "--good 2.13.0 is newer than --bad 2.5.1: swap them (--good 2.5.1 --bad 2.13.0)"),
        ("2.6.0.dev20241101", "2.6.0.dev20241001", "swap them (--good 2.6.0.dev20241001 --bad 2.6.0.dev20241101)"),
        ("2.13", "2.13.0", "are the same release"),
    ],
)
def test_swapped_or_equal_ends_are_refused_with_what_to_type(good: str, bad: str, message: str) -> None:
    """Before the index is listed or anything built; the predicate is "changed", so swapping loses nothing."""
    with pytest.raises(BisectError) as caught:
        BisectRequest(good, bad, case_ids=("a",))
    assert (
        message in str(caught.value)
        and "a fix bisects as a regression does" in str(caught.value)
        or ("same release" in message and message in str(caught.value))
    )


def test_nightly_ends_are_dates_compared_as_dates() -> None:
    """With --nightlies the ends are days: in order they pass, swapped or equal they are refused alike."""
    BisectRequest("2026-01-03", "2026-02-01", case_ids=("a",), nightlies=True)
    with pytest.raises(BisectError, match=r"swap them \(--good 2026-01-03 --bad 2026-02-01\)"):
        BisectRequest("2026-02-01", "2026-01-03", case_ids=("a",), nightlies=True)
    with pytest.raises(BisectError, match="are the same day"):
        BisectRequest("2026-01-03", "2026-01-03", case_ids=("a",), nightlies=True)
    with pytest.raises(CasekitError, match="not a date"):
        BisectRequest("2.13.0", "2026-01-03", case_ids=("a",), nightlies=True)


def test_a_folder_given_as_a_document_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(CasekitError, match="is a folder"):
        Outputs(json_out=tmp_path)
    with pytest.raises(CasekitError, match="--html takes a file name"):
        Outputs(html_out=Path("-"))


def test_predicate_flags_choose_one_predicate() -> None:
    assert predicate_for().describe() == predicate_for(None, None, False).describe()
    assert predicate_for(post_holds=True).describe() != predicate_for().describe()
    with pytest.raises(BisectError, match="choose one of --site, --status and --post-holds"):
        predicate_for("repro.py:5", "pre")


def test_one_case_writes_its_document_and_page_and_exits_0(tmp_path: Path, archive: Archive) -> None:
    outputs = Outputs(tmp_path / "out" / "bisect.json", tmp_path / "out" / "bisect.html")
    said: list[str] = []
    outcome = run_bisect(
        request(tmp_path, outputs=outputs), archive, notice=said.append, seams=seams(FakeReplay(HISTORY))
    )
    assert said == ["bisecting case item-case between torch 2.5.1 (good) and 2.10.0 (bad) with the venv runner"]
    assert outcome.exit_code == ExitCode.OK and not outcome.interrupted
    assert outcome.written == [outputs.json_out, outputs.html_out]
    assert outcome.document is not None and outcome.document["schema"] == BISECT_SCHEMA
    assert json.loads(outputs.json_out.read_text()) == outcome.document  # type: ignore[union-attr]
    page = outputs.html_out.read_text()  # type: ignore[union-attr]
    assert "<!DOCTYPE html>" in page
    assert "regression in 2.8.0" in outcome.text
    # The page says what the terminal says: the upstream diff, and when it was made (not "on -").
    compare = outcome.document["compare_url"]
    assert compare and compare in outcome.text and f'<a href="{compare}">' in page
    assert re.search(r"generated by casekit on 20\d\d-\d\d-\d\dT", page), page[-300:]


def test_json_dash_writes_no_file(tmp_path: Path, archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    outcome = run_bisect(request(tmp_path, outputs=Outputs(Path("-"))), archive, seams=seams(FakeReplay(HISTORY)))
    assert outcome.written == [] and not (tmp_path / "-").exists() and outcome.document is not None


def test_a_document_that_cannot_be_written_keeps_the_results_and_exits_2(tmp_path: Path, archive: Archive) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    outputs = Outputs(blocker / "bisect.json")  # its folder is a file
    outcome = run_bisect(request(tmp_path, outputs=outputs), archive, seams=seams(FakeReplay(HISTORY)))
    assert outcome.exit_code == ExitCode.PROBLEM and outcome.written == []
    assert len(outcome.write_failures) == 1 and str(blocker / "bisect.json") in outcome.write_failures[0]
    assert "regression in 2.8.0" in outcome.text


def test_several_cases_exit_2_when_one_cannot_be_bisected(tmp_path: Path, archive: Archive) -> None:
    other = make_case()
    other.id, other.post, other.observations = "no-post", None, {"pre": other.observations["pre"]}
    archive.save(other)
    outputs = Outputs(tmp_path / "many.json")
    outcome = run_bisect(
        request(tmp_path, "item-case", "no-post", predicate=predicate_for(post_holds=True), outputs=outputs),
        archive,
        seams=seams(FakeReplay(HISTORY)),
    )
    assert outcome.document is not None and outcome.document["schema"] == MULTI_SCHEMA
    assert [error["case"] for error in outcome.document["errors"]] == ["no-post"]
    assert outcome.exit_code == ExitCode.PROBLEM and outcome.written == [outputs.json_out]
    alone = run_bisect(request(tmp_path, "item-case", "item-case"), archive, seams=seams(FakeReplay(HISTORY)))
    assert alone.exit_code == ExitCode.OK


@pytest.mark.parametrize(("stop", "code"), [(KeyboardInterrupt(), 130), (Stopped(signal.SIGTERM), 143)])
def test_ctrl_c_says_how_to_resume_and_exits_128_plus_the_signal(
    tmp_path: Path, archive: Archive, stop: BaseException, code: int
) -> None:
    fake = FakeReplay(HISTORY)

    def interrupted_third(*args, **kwargs):  # type: ignore[no-untyped-def]
        if len(fake.specs) == 2:
            raise stop
        return fake(*args, **kwargs)

    outputs = Outputs(tmp_path / "bisect.json")
    outcome = run_bisect(
        request(tmp_path, outputs=outputs),
        archive,
        seams=ReleaseSeams(run_target=interrupted_third, make_runner=no_runner),
    )
    assert outcome.interrupted and outcome.exit_code == code and outcome.document is None
    assert outcome.text == (
        f"interrupted; finished steps are cached in {tmp_path / 'cache.json'}: run the same command again to resume"
    )
    assert not outputs.json_out.exists()  # type: ignore[union-attr]
    resumed = run_bisect(request(tmp_path, outputs=outputs), archive, seams=seams(fake))
    assert resumed.document is not None and resumed.document["first_bad"] == "2.8.0"
    assert [s["cached"] for s in resumed.document["steps"]][:2] == [True, True]
