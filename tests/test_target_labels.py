"""One build, one label: a target is known by the exact build that ran, however it was asked.

`--torch 2.13` means the newest 2.13.x; when that is 2.13.0 it is the same build (the same env) as
`--torch 2.13.0`, and one report column, one history key, one JSON label. A shard plan still knows the
target by the label asked (every machine plans before it resolves anything), so merging keys on that.
The fake is the Runner interface only (tests/fakes.py); the label rule is the venv runner's own class
facts, asked through the registry, and the rest is replay's real code. test_runner_venv.py builds the
real env from a prefix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.replay.document import read_replay_document
from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay
from casekit.replay.run import ReplayOptions
from casekit.replay.shard import merge_reports
from casekit.runners import registry
from casekit.runners.interface import ProbeJob, Runner, TargetSpec
from casekit.runners.torch_source.request import Channel

from .fakes import RecordedRunner, Target, captured_archive

quiet = lambda message: None  # noqa: E731


class _Build(RecordedRunner):
    """A managed target whose probe reports the exact build it ran (what a real env's probe says)."""

    def run_probe(self, jobs: list[ProbeJob], progress):  # type: ignore[no-untyped-def]
        batch = super().run_probe(jobs, progress)
        batch.environment["torch"] = f"{self.target.release}+cpu"
        return batch


def _managed(release: str, broken: set[str] | None = None) -> tuple[list[tuple[str, ProbeJob]], object]:
    log: list[tuple[str, ProbeJob]] = []

    def factory(spec: TargetSpec) -> Runner:
        failing = spec.torch in (broken or set())
        return _Build(spec, Target(release, prepare_error="no wheel here" if failing else None), log)

    return log, factory


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    return captured_archive(tmp_path / "cases")


def test_a_release_prefix_is_labelled_by_the_build_it_ran() -> None:
    asked = TargetSpec("venv", torch="2.13")
    assert registry.label(asked) == "venv:torch-2.13"  # before it runs, the label asked
    assert registry.label(registry.as_built(asked, "2.13.0+cpu")) == "venv:torch-2.13.0"
    nightly = TargetSpec("venv", channel=Channel.NIGHTLY, torch="2026-01-05")
    by_version = TargetSpec("venv", channel=Channel.NIGHTLY, torch="2.14.0.dev20260105")
    built = {registry.label(registry.as_built(s, "2.14.0.dev20260105+cpu")) for s in (nightly, by_version)}
    assert built == {"venv:torch-nightly-2.14.0.dev20260105"}  # a date and its version: one nightly, one label
    cuda = TargetSpec("venv", torch="2.13", cuda="cu126")
    assert registry.label(registry.as_built(cuda, "2.13.1+cu126")) == "venv:torch-2.13.1-cu126"
    # what names no torch version stays as asked: an interpreter, an image the user named, a probe that said nothing
    python = TargetSpec("python", python="/opt/envs/nightly/bin/python")
    assert registry.as_built(python, "2.13.0") == python
    image = TargetSpec("docker", torch="2.13", image="team/torch:latest")
    assert registry.as_built(image, "2.13.0") == image
    assert registry.as_built(asked, None) == asked and registry.as_built(asked, "not a version") == asked


def test_two_requests_of_one_build_are_one_target_with_one_label(archive: Archive, tmp_path: Path) -> None:
    log, factory = _managed("2.13.0")
    out = tmp_path / "r.json"
    request = ReplayRequest(targets=TargetChoice(torches=("2.13", "2.13.0")), json_out=out)
    outcome = run_replay(request, archive, factory, quiet)  # type: ignore[arg-type]
    document = read_replay_document(out)
    assert [t.label for t in document.targets] == ["venv:torch-2.13.0"]
    assert {r.target for r in document.results} == {"venv:torch-2.13.0"} and len(document.results) == 5
    [target] = document.targets
    assert target.asked is None or target.asked == "venv:torch-2.13"
    said = " ".join(target.warnings)
    assert "ran the same build" in said and "venv:torch-2.13.0" in said
    history = archive.load("breaks").replays
    assert [r.target for r in history] == ["venv:torch-2.13.0"]  # recorded once, by the build
    assert outcome.exit_code.value in (0, 1)
    assert {label for label, _ in log} == {"venv:torch-2.13", "venv:torch-2.13.0"}  # both ran: only then is it known


def test_a_prefix_replayed_today_and_the_exact_version_yesterday_share_a_history_key(archive: Archive) -> None:
    for asked in ("2.13", "2.13.0"):
        _, factory = _managed("2.13.0")
        run_replay(ReplayRequest(targets=TargetChoice(torches=(asked,))), archive, factory, quiet)  # type: ignore[arg-type]
    assert {r.target for r in archive.load("breaks").replays} == {"venv:torch-2.13.0"}


def test_shards_of_a_prefix_merge_by_the_label_asked_even_when_one_shard_failed(
    archive: Archive, tmp_path: Path
) -> None:
    """The plan's matrix and layout hold the label asked; a shard whose env failed knows only that one."""
    folder = tmp_path / "results"
    options = ReplayOptions(record=False)
    for k, broken in ((1, set()), (2, {"2.13"})):
        _, factory = _managed("2.13.0", broken)
        request = ReplayRequest(
            targets=TargetChoice(torches=("2.13",)), shard=f"{k}/2", results_dir=folder, options=options
        )
        run_replay(request, archive, factory, quiet)  # type: ignore[arg-type]
    files = sorted(folder.rglob("*.json"))
    assert len(files) == 2, files  # one file per (target as planned, shard): the failed shard did not add a third
    merged = merge_reports([folder], allow_partial=False)
    labels = {t.label for t in merged.data.targets}
    assert labels == {"venv:torch-2.13.0", "venv:torch-2.13"}  # the build that ran, and the shard that could not
    assert merged.data.failed_targets()[0].label == "venv:torch-2.13"
    _, factory = _managed("2.13.0")  # shard 2 retried, and this time its env builds: it replaces its own file
    request = ReplayRequest(targets=TargetChoice(torches=("2.13",)), shard="2/2", results_dir=folder, options=options)
    run_replay(request, archive, factory, quiet)  # type: ignore[arg-type]
    assert len(sorted(folder.rglob("*.json"))) == 2
    retried = merge_reports([folder])
    assert {t.label for t in retried.data.targets} == {"venv:torch-2.13.0"} and not retried.data.failed_targets()
    assert len(retried.data.results) == 5 and retried.retries
