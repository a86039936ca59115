"""The runner registry: each runner's facts, asked by the core instead of its name.

A runner added here in the test (one class at the `Runner` interface serving
probe results recorded on real torch, one registry line) is replayed and
bisected through the real core: plan, replay, classification, the bisection
and its "reproduce" line, building ahead. The real runners' own behaviour is
tested in test_runner_python.py, test_runner_venv.py and test_docker_runner.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from casekit.archive.store import Archive
from casekit.bisect.ahead import Ahead
from casekit.bisect.engine import CacheSettings
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases, version_target_key
from casekit.capture import CaptureRequest, capture
from casekit.errors import CasekitError, RunnerError
from casekit.outcome import FailOn
from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay
from casekit.replay.run import ReplayOptions
from casekit.replay.shard import ShardError, merge_reports
from casekit.runners import registry
from casekit.runners.interface import ProgressFn, Runner, TargetSpec, VersionSource

from .fakes import FIXTURE_SCRIPTS, RecordedRunner, Target, recorded_targets

quiet = lambda message: None  # noqa: E731


class TrivialRunner(RecordedRunner):
    """A runner that only this test knows: the recorded probe results of the torch it is asked for.

    Every fact is the interface's default (no build, versions from the index,
    no pins, no --allow keys, the managed label) but its name."""

    name = "trivial"
    serves: ClassVar[dict[str, str]] = {}  # a release without recordings -> the recorded one it behaves as
    prepared: ClassVar[list[str]] = []  # what prepare() was asked, across instances
    # the interface's own key check, not the recorded runner's stand-in that accepts every key
    check_options = vars(Runner)["check_options"]

    def __init__(self, spec: TargetSpec) -> None:
        release = spec.torch or "?"
        super().__init__(spec, Target(self.serves.get(release, release)), [])

    def prepare(self, progress: ProgressFn) -> None:
        self.prepared.append(self.spec.torch or "?")


@pytest.fixture
def trivial(monkeypatch: pytest.MonkeyPatch) -> type[Runner]:
    """The trivial runner, registered for this test (the one registry line)."""
    monkeypatch.setitem(registry.RUNNERS, "trivial", TrivialRunner)
    monkeypatch.setattr(TrivialRunner, "prepared", [])
    monkeypatch.setattr(TrivialRunner, "serves", {})
    return TrivialRunner


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    """One case captured (through capture) from a fixture script as torch 2.5.1 saw it."""
    store = Archive(tmp_path / "cases")
    [spec], factory, _ = recorded_targets({"capture-2.5.1": Target("2.5.1")})
    request = CaptureRequest(script=FIXTURE_SCRIPTS / "deepcopy_state.py", case_id="deepcopy-state")
    capture(request, factory(spec), store, quiet)
    return store


def test_a_runner_added_in_a_test_is_replayed_through_the_core(trivial: type[Runner], archive: Archive) -> None:
    request = ReplayRequest(
        targets=TargetChoice(torches=("2.13.0",), runner="trivial"),
        options=ReplayOptions(record=False),
        fail_on=FailOn.NEVER,
    )
    outcome = run_replay(request, archive, registry.make_runner, quiet)
    assert [t.label for t in outcome.document.targets] == ["trivial:torch-2.13.0"]
    [result] = outcome.document.results
    assert result.target == "trivial:torch-2.13.0"
    assert [s.site_class for s in result.scripts["pre"].sites] == ["moved"]  # 2.13.0 breaks inside copy.py
    assert TrivialRunner.prepared == ["2.13.0"]
    with pytest.raises(RunnerError, match=r"unknown trivial option\(s\): network \(known: none\)"):
        TargetChoice(torches=("2.13.0",), runner="trivial", allow=("network=host",)).specs()


def test_a_runner_added_in_a_test_is_bisected_through_the_core(trivial: type[Runner], archive: Archive) -> None:
    case = archive.load("deepcopy-state")
    config = ReleaseBisect("2.5.1", "2.13.0", versions=["2.5.1", "2.13.0"], runner="trivial", cache=CacheSettings(None))
    report = bisect_releases(case, config, ReleaseSeams(make_runner=registry.make_runner))
    assert (report.last_good, report.first_bad, report.runner) == ("2.5.1", "2.13.0", "trivial")
    assert report.reproduce == "casekit replay --case deepcopy-state --torch 2.13.0 --runner trivial --no-record"
    assert sorted(TrivialRunner.prepared) == ["2.13.0", "2.5.1"]


def test_building_ahead_asks_the_runner_and_its_disk(
    trivial: type[Runner], archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner that does not build is never built ahead; one that builds, only while its own disk has room."""
    monkeypatch.setattr(TrivialRunner, "serves", {"2.6.0": "2.5.1", "2.7.0": "2.5.1", "2.8.0": "2.13.0"})
    case = archive.load("deepcopy-state")
    config = ReleaseBisect(
        "2.5.1",
        "2.13.0",
        versions=["2.5.1", "2.6.0", "2.7.0", "2.8.0", "2.13.0"],
        runner="trivial",
        cache=CacheSettings(None),
        ahead=Ahead(limit=2, min_free_gib=1),
    )

    def bisect() -> list[str]:
        messages: list[str] = []
        TrivialRunner.prepared.clear()
        report = bisect_releases(case, config, ReleaseSeams(make_runner=registry.make_runner, progress=messages.append))
        assert report.first_bad == "2.8.0"
        return [m for m in messages if m.startswith("[ahead]")]

    assert bisect() == []  # it builds nothing: no builder
    assert sorted(TrivialRunner.prepared) == ["2.13.0", "2.5.1", "2.7.0", "2.8.0"]  # each by its own run
    monkeypatch.setattr(TrivialRunner, "builds_envs", True)
    monkeypatch.setattr(TrivialRunner, "free_build_bytes", classmethod(lambda cls: 0))
    full = bisect()
    assert full and all("ahead: under 1 GiB free" in m for m in full), full
    monkeypatch.setattr(TrivialRunner, "free_build_bytes", classmethod(lambda cls: None))  # it cannot tell
    built = bisect()
    assert any("ready ahead of need" in m for m in built) and not any("GiB free" in m for m in built), built


def test_the_real_runners_keep_their_labels_and_reproduce_flags() -> None:
    venv = registry.target_spec("venv", torch="2.13.0", cuda="cu124")
    docker = TargetSpec("docker", torch="2.5.1", image="img")
    python = registry.interpreter_target("/opt/t/bin/python")
    assert [registry.label(s) for s in (venv, docker, python, registry.interpreter_target())] == [
        "venv:torch-2.13.0-cu124",
        "docker:torch-2.5.1-img",
        "python:/opt/t/bin/python",
        "python:current",
    ]
    assert registry.replay_flags(venv) == ["--torch", "2.13.0", "--cuda", "cu124"]  # venv: what --torch gets
    assert registry.replay_flags(docker) == ["--torch", "2.5.1", "--runner", "docker", "--image", "img"]
    assert registry.replay_flags(python) == ["--python", "/opt/t/bin/python"]


@pytest.mark.parametrize(
    "spec",
    [
        TargetSpec("venv", torch="2.13.0", cuda="cu124", index_url="https://example.invalid/simple"),
        TargetSpec("docker", torch="2.5.1"),
        TargetSpec("python", python="/opt/t/bin/python", torch="2.5.1"),
    ],
)
def test_a_runners_replay_flags_select_the_same_target_again(spec: TargetSpec) -> None:
    flags = registry.replay_flags(spec)
    words = dict(zip(flags[::2], flags[1::2], strict=True))
    choice = TargetChoice(
        pythons=tuple(v for k, v in words.items() if k == "--python"),
        torches=tuple(v for k, v in words.items() if k == "--torch"),
        runner=words.get("--runner"),
        cuda=words.get("--cuda"),
        index_url=words.get("--index-url"),
    )
    [again] = choice.specs()
    assert registry.label(again) == registry.label(spec) and again.runner == spec.runner


def test_two_remote_engines_with_the_same_torch_are_two_targets(
    archive: Archive, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = []
    for host in ("tcp://gpu-a:2376", "ssh://me@gpu-b", "ssh://me@gpu-b"):
        monkeypatch.setenv("DOCKER_HOST", host)
        [spec] = TargetChoice(torches=("2.13.0",), runner="docker").specs()
        assert spec.host == host
        path = tmp_path / f"{len(paths)}.json"
        request = ReplayRequest(
            targets=TargetChoice(torches=("2.13.0",), runner="docker"),
            options=ReplayOptions(record=False),
            fail_on=FailOn.NEVER,
            json_out=path,
        )
        run_replay(request, archive, lambda spec: RecordedRunner(spec, Target("2.13.0"), []), quiet)
        paths.append(path)
    merged = merge_reports(paths[:2])
    assert sorted(t.label for t in merged.data.targets) == [
        "docker:torch-2.13.0@ssh://gpu-b",  # no user name in a label that goes into shared bundles
        "docker:torch-2.13.0@tcp://gpu-a:2376",
    ]
    with pytest.raises(ShardError, match="also in"):  # the same engine twice is the same cells
        merge_reports(paths[1:])
    spec = registry.target_spec("docker", torch="2.13.0")
    assert registry.display(spec) == "docker:torch-2.13.0 on ssh://gpu-b"
    key = version_target_key("docker", "2.13.0", host=spec.host)
    assert key == ReleaseBisect("2.5.1", "2.13.0", runner="docker").target_key("2.13.0") != "docker:2.13.0"
    monkeypatch.delenv("DOCKER_HOST")
    assert registry.target_spec("docker", torch="2.13.0").host is None  # this machine's engine: no host


def test_allow_help_and_unknown_keys_come_from_each_runner() -> None:
    text = registry.allow_help()
    assert "python/venv (bubblewrap): network=host" in text and "docker: network=bridge" in text
    for cls in registry.RUNNERS.values():
        shown = {example.split("=", 1)[0] for example in cls.allow_examples}
        assert shown <= cls.allow_options, f"{cls.name} shows keys it refuses: {shown - cls.allow_options}"
        with pytest.raises(RunnerError, match=rf"^unknown {cls.name} option\(s\): netwrk \(known: "):
            registry.check_target(TargetSpec(cls.name, options=(("netwrk", "x"),)))
    with pytest.raises(RunnerError, match=r"unknown docker option\(s\): gpu "):  # bubblewrap's key, not docker's
        TargetChoice(torches=("2.13",), runner="docker", allow=("gpu=none",)).specs()


def test_the_registry_answers_what_the_core_asks() -> None:
    assert registry.interpreter_runner().versions is VersionSource.INTERPRETERS
    assert registry.image_runner().runs_images
    assert registry.takes_interpreters(registry.interpreter_runner().name)
    assert not registry.takes_interpreters(registry.DEFAULT_RUNNER)
    assert registry.runner_class(registry.DEFAULT_RUNNER).builds_envs
    assert [registry.runner_class(n).pins_libraries for n in registry.runner_names()] == [
        registry.runner_class(n).versions is VersionSource.INDEX for n in registry.runner_names()
    ]
    with pytest.raises(CasekitError, match="unknown runner 'conda' \\(choose one of: python, venv, docker\\)"):
        registry.runner_class("conda")
    with pytest.raises(CasekitError, match="--runner python takes --python PATH, not --torch"):
        TargetChoice(torches=("2.13",), runner="python").specs()
