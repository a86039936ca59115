"""Every file casekit writes for others to read is 0644 under umask 022, as open() would make it:
bundles (and the archive's .gitignore for its index), the replay JSON, every report format (the HTML site's pages and listing too), the
bisection's --json and --html and its cache, and the --json of show and merge. mkstemp's 0600
once left `bisect --json` and the bisect cache unreadable to the team that shares them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bisect.engine import CacheSettings
from casekit.bisect.plan import BisectRequest, Outputs, run_bisect
from casekit.bisect.releases import ReleaseSeams
from casekit.cli.common import emit_json
from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay
from casekit.report.formats import FORMATS
from casekit.report.plan import ReportRequest, run_report
from tests.fakes import Target, recorded_targets
from tests.test_bisect_releases_fast import HISTORY, VERSIONS, FakeReplay, make_case, no_runner


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def modes(*roots: Path) -> dict[str, str]:
    """Every file below (or at) the roots -> its permission bits, casekit's own cache folders left out."""
    found = {}
    for root in roots:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            if ".casekit" not in path.parts and path.name != ".casekit.lock":
                found[str(path)] = oct(stat.S_IMODE(path.stat().st_mode))
    return found


def test_every_shared_file_casekit_writes_is_0644_under_umask_022(tmp_path: Path, umask_022: None) -> None:
    archive = Archive(tmp_path / "cases")
    archive.save(make_case())  # a bundle
    _, factory, _ = recorded_targets({"t-2.13.0": Target("2.13.0")})
    replay_json = tmp_path / "out" / "replay.json"
    run_replay(
        ReplayRequest(TargetChoice(pythons=("t-2.13.0",)), json_out=replay_json), archive, factory, lambda _: None
    )
    run_report(ReportRequest(tuple(FORMATS), tmp_path / "report", (replay_json,)), archive)
    outputs = Outputs(tmp_path / "out" / "bisect.json", tmp_path / "out" / "bisect.html")
    cache = tmp_path / "cache" / "bisect-cache.json"
    request = BisectRequest(
        "2.5.1",
        "2.10.0",
        case_ids=("item-case",),
        versions=",".join(VERSIONS),
        cache=CacheSettings(cache),
        outputs=outputs,
    )
    run_bisect(request, archive, seams=ReleaseSeams(run_target=FakeReplay(HISTORY), make_runner=no_runner))
    emit_json({"schema": "casekit.case/1"}, tmp_path / "out" / "show.json")  # show --json, merge --json

    written = modes(archive.root, tmp_path / "out", tmp_path / "report", cache)
    expected = [
        archive.path_for("item-case"),
        archive.root / ".gitignore",
        replay_json,
        outputs.json_out,
        outputs.html_out,
        cache,
    ]
    expected += [tmp_path / "out" / "show.json", tmp_path / "report" / "index.html", tmp_path / "report" / "report.md"]
    expected += [tmp_path / "report" / "junit.xml", tmp_path / "report" / "report.json"]
    expected += [tmp_path / "report" / "cases" / "item-case.html", tmp_path / "report" / "cases" / ".casekit-report"]
    assert set(written) == {str(path) for path in expected}
    assert {path: mode for path, mode in written.items() if mode != "0o644"} == {}
