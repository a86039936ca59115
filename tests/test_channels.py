"""Torch channels, variants and index listings, in milliseconds: the pure choices, the listing reader, the
env key, nightly bisection's report, disk usage and pruning. The real installs from a local PyTorch-shaped
index (uv, pip, the probe) are in test_torch_channels.py."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from casekit.bisect.engine import CacheSettings
from casekit.bisect.predicates import Predicate
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases
from casekit.bisect.report import read_report, render_text, write_report
from casekit.bundle import sha256_text
from casekit.classify import classify_case
from casekit.errors import CasekitError, EnvironmentFailed
from casekit.model import Case, ScriptObservation, ScriptSource, ScriptStatus, Site
from casekit.replay.plan import TargetChoice
from casekit.replay.run import ReplayOptions, RunnerFactory, TargetRun
from casekit.runners import registry
from casekit.runners.interface import ProgressFn, TargetSpec
from casekit.runners.torch_source.builds import Build, build_from_filename, hidden_candidate, installable
from casekit.runners.torch_source.index import parse_page, read_listing
from casekit.runners.torch_source.pick import newest_release, nightly_on, nightly_range
from casekit.runners.torch_source.request import (
    Channel,
    ChannelError,
    format_torch_request,
    nightly_date,
    parse_torch_request,
)
from casekit.runners.torch_source.source import choose_source
from casekit.runners.venv.cache import (
    CachedEnv,
    EnvRequest,
    disk_usage,
    mark_used,
    parse_age,
    prune_envs,
    select_for_pruning,
)
from tests.conftest import run_casekit

TAGS = "cp311-cp311-manylinux_2_28_x86_64"
BASE = "https://download.pytorch.org/whl"


@pytest.fixture(autouse=True)
def _pytorchs_own_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the mapping to PyTorch's own index (nothing here opens a connection)."""
    monkeypatch.delenv("CASEKIT_TORCH_INDEX", raising=False)


def nightly(date: str, base: str = "2.14.0", variant: str = "cpu") -> Build:
    day = date.replace("-", "")
    name = f"torch-{base}.dev{day}+{variant}-{TAGS}.whl"
    build = build_from_filename(name, f"{BASE}/nightly/{variant}/{name.replace('+', '%2B')}")
    assert build is not None
    return build


# ------------------------------------------------------------------ requests and sources


def test_a_torch_request_names_its_channel_before_a_colon() -> None:
    assert parse_torch_request("2.13") == (Channel.RELEASE, "2.13")
    assert parse_torch_request("latest") == (Channel.RELEASE, None)
    assert parse_torch_request("nightly") == (Channel.NIGHTLY, None)
    assert parse_torch_request("nightly:2026-01-05") == (Channel.NIGHTLY, "2026-01-05")
    assert parse_torch_request("nightly:2.14.0.dev20260105") == (Channel.NIGHTLY, "2.14.0.dev20260105")
    assert parse_torch_request("pypi:2.13") == (Channel.PYPI, "2.13")
    assert parse_torch_request("test:2.14") == (Channel.TEST, "2.14")
    for text in ("nightly:2026-01-05", "nightly", "pypi:2.13", "2.13.0", "test:2.14"):
        assert format_torch_request(*parse_torch_request(text)) == text
    for bad in ("beta:2.13", "nightly:2026-13-01", "nightly:2.13.0", "nightly:yesterday"):
        with pytest.raises(ChannelError):
            parse_torch_request(bad)


def test_no_cuda_and_no_gpu_means_a_cpu_build_from_the_variants_index() -> None:
    source = choose_source(Channel.RELEASE, None, gpu_here=False)
    assert (source.variant, source.index_url, source.listed) == ("cpu", f"{BASE}/cpu", True)
    assert source.note and "CPU build" in source.note and "--cuda cu126" in source.note
    assert choose_source(Channel.NIGHTLY, None, gpu_here=False).index_url == f"{BASE}/nightly/cpu"
    assert choose_source(Channel.TEST, "cu126", gpu_here=False).index_url == f"{BASE}/test/cu126"
    assert choose_source(Channel.RELEASE, "cu124", gpu_here=False).note is None  # asked for: nothing to explain


def test_a_gpu_host_keeps_pypis_build_and_overrides_replace_the_mapping() -> None:
    on_gpu = choose_source(Channel.RELEASE, None, gpu_here=True)
    assert (on_gpu.variant, on_gpu.index_url, on_gpu.listed) == (None, None, False)
    assert on_gpu.note and "--cuda cpu" in on_gpu.note
    pypi = choose_source(Channel.PYPI, None, gpu_here=False)
    assert (pypi.variant, pypi.index_url, pypi.listed) == (None, None, False)
    with pytest.raises(ChannelError, match="pypi"):
        choose_source(Channel.PYPI, "cu124")
    mirror = choose_source(Channel.RELEASE, None, index_url="https://mirror/simple", gpu_here=False)
    assert (mirror.index_url, mirror.listed) == ("https://mirror/simple", False), "the installer reads it as given"
    folder = choose_source(Channel.NIGHTLY, None, find_links="/opt/nightlies", gpu_here=False)
    assert (folder.index_url, folder.listed) == ("/opt/nightlies", True), "a folder of nightlies is a listing too"
    with pytest.raises(ChannelError, match="--cuda"):
        choose_source(Channel.RELEASE, "cuda12")


def test_the_mirror_of_pytorchs_layout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASEKIT_TORCH_INDEX", "http://127.0.0.1:9/whl/")
    assert choose_source(Channel.NIGHTLY, "cu124", gpu_here=False).index_url == "http://127.0.0.1:9/whl/nightly/cu124"


def test_replay_targets_carry_the_channel_and_labels_and_flags_say_it_again() -> None:
    specs = TargetChoice(torches=("2.13", "nightly", "nightly:2026-01-05", "pypi:2.13")).specs()
    assert [(s.channel, s.torch) for s in specs] == [
        (Channel.RELEASE, "2.13"),
        (Channel.NIGHTLY, None),
        (Channel.NIGHTLY, "2026-01-05"),
        (Channel.PYPI, "2.13"),
    ]
    assert [registry.label(s) for s in specs] == [
        "venv:torch-2.13",
        "venv:torch-nightly-latest",
        "venv:torch-nightly-2026-01-05",
        "venv:torch-pypi-2.13",
    ]
    assert registry.replay_flags(specs[2]) == ["--torch", "nightly:2026-01-05"]
    with pytest.raises(
        CasekitError, match="--runner docker cannot provide nightly builds of torch .--runner venv does"
    ):
        TargetChoice(torches=("nightly",), runner="docker").specs()


# ------------------------------------------------------------------ listings


PAGE = """<!DOCTYPE html><html><body><h1>Links for torch</h1>
<a href="/whl/nightly/cpu/torch-2.14.0.dev20260104%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl" data-dist-info-metadata="sha256=ab" data-core-metadata="sha256=ab">torch-2.14.0.dev20260104+cpu-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>
<a href="/whl/nightly/cpu/torch-2.14.0.dev20260105%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl">torch-2.14.0.dev20260105+cpu-cp312-cp312-manylinux_2_28_x86_64.whl</a><br/>
<a href="/whl/nightly/cpu/torch-2.14.0.dev20260105%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl">torch-2.14.0.dev20260105+cpu-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>
<a href="/whl/nightly/cpu/torch-2.14.0.dev20260105%2Bcpu-cp311-cp311-win_amd64.whl">torch-2.14.0.dev20260105+cpu-cp311-cp311-win_amd64.whl</a><br/>
<a href="/whl/nightly/cpu/torchvision-0.25.0.dev20260105%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl">torchvision-0.25.0.dev20260105+cpu-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>
<a href="/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=00ff">torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>
</body></html>"""


def test_a_pytorch_page_is_read_with_its_quoted_names_and_without_fragments() -> None:
    builds = parse_page(PAGE, "https://download.pytorch.org/whl/nightly/cpu/torch/")
    names = [b.filename for b in builds]
    assert "torch-2.14.0.dev20260104+cpu-cp311-cp311-manylinux_2_28_x86_64.whl" in names
    assert not any(name.startswith("torchvision") for name in names)
    release = next(b for b in builds if not b.version.is_devrelease)
    assert (
        release.url == "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    )
    here = installable(builds, "3.11")
    assert {b.filename.split("-", 3)[2] for b in here} == {"cp311"} and all("win" not in b.filename for b in here)
    assert [str(b.date) for b in here if b.date] == ["2026-01-04", "2026-01-05"]
    assert newest_release(here, "2.13") == release and newest_release(here, "2.13.0") == release
    assert newest_release(here, "2.12") is None


def test_a_folder_of_wheels_is_a_listing(tmp_path: Path) -> None:
    for name in (f"torch-2.14.0.dev20260104+cpu-{TAGS}.whl", "numpy-2.0.0-cp311-cp311-manylinux_2_28_x86_64.whl"):
        (tmp_path / name).write_bytes(b"")
    listing = read_listing(str(tmp_path))
    assert [b.public for b in listing.builds] == ["2.14.0.dev20260104"]
    assert listing.builds[0].url.startswith("file://")


def test_an_unreachable_index_is_one_line_saying_so() -> None:
    from casekit.runners.torch_source.index import IndexUnreachable

    with pytest.raises(IndexUnreachable, match=r"cannot reach http://127\.0\.0\.1:9/whl/cpu/torch/"):
        read_listing("http://127.0.0.1:9/whl/cpu", timeout=5)


def test_pypis_build_is_announced_only_when_it_is_about_to_be_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch's index out of reach (nothing listens on port 9): falling back to PyPI's build is said when
    that build will be downloaded, not when the wheel folder pip is configured with (PIP_FIND_LINKS, which
    casekit hands uv too) serves a CPU wheel that fits."""
    from casekit.runners.venv.resolve import IndexSeams, resolve_request

    monkeypatch.setenv("CASEKIT_TORCH_INDEX", "http://127.0.0.1:9/whl")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / f"torch-2.13.0+cpu-{TAGS}.whl").write_bytes(b"")
    said: dict[str, list[str]] = {"links": [], "none": [], "other": []}
    for name, torch, links in (("links", "2.13.0", wheels), ("none", "2.13.0", None), ("other", "2.12.1", wheels)):
        if links:
            monkeypatch.setenv("PIP_FIND_LINKS", str(links))
        else:
            monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
        spec = TargetSpec("venv", torch=torch)
        request = resolve_request(spec, tmp_path / "cache", "uv", said[name].append, IndexSeams(gpu_here=False))
        assert request.cuda is None and request.torch == torch and request.find_links == (str(links) if links else None)
    fallback = "cannot reach http://127.0.0.1:9/whl/cpu/torch/"
    assert said["links"] == [], said["links"]
    assert len(said["none"]) == 1 and said["none"][0].startswith(fallback)
    assert "taking PyPI's build instead (CUDA on Linux, ~10x a CPU build" in said["none"][0]
    assert said["other"] == said["none"]  # the folder holds no 2.12.1: PyPI's is downloaded


def test_a_nightly_date_rolls_back_to_its_neighbour_and_hidden_builds_are_found_by_url() -> None:
    listed = [nightly(d) for d in ("2026-01-10", "2026-01-11", "2026-01-13")]
    assert nightly_on(listed, None).build.public == "2.14.0.dev20260113"
    assert nightly_on(listed, dt.date(2026, 1, 11)).notes == ()
    rolled = nightly_on(listed, dt.date(2026, 1, 12))
    assert rolled.build.public == "2.14.0.dev20260111" and "no nightly on 2026-01-12" in rolled.notes[0]
    asked: list[str] = []
    hidden = {nightly("2026-01-07").url}

    def exists(url: str) -> bool:
        asked.append(url)
        return url in hidden

    found = nightly_on(listed, dt.date(2026, 1, 8), exists=exists)
    assert found.build.public == "2.14.0.dev20260107" and not found.build.listed
    assert found.build.url == nightly("2026-01-07").url, "the name follows the oldest listed build's pattern"
    assert asked[0].endswith("torch-2.14.0.dev20260108%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert any("below the index listing's horizon (2026-01-10)" in note for note in found.notes)
    with pytest.raises(EnvironmentFailed, match="no nightly found on or up to 7 days before 2025-12-01"):
        nightly_on(listed, dt.date(2025, 12, 1), exists=lambda url: False)


def test_a_nightly_range_rolls_its_ends_inward_and_takes_the_higher_of_two_builds_on_one_day() -> None:
    listed = [nightly(d) for d in ("2026-01-10", "2026-01-11", "2026-01-12", "2026-01-14")]
    listed.append(nightly("2026-01-12", base="2.15.0"))  # the day the version number moved on
    hidden = {nightly(d).url for d in ("2026-01-07", "2026-01-08")}
    builds, notes = nightly_range(listed, dt.date(2026, 1, 7), dt.date(2026, 1, 15), exists=lambda url: url in hidden)
    assert [b.public for b in builds] == [
        "2.14.0.dev20260107",
        "2.14.0.dev20260108",
        "2.14.0.dev20260110",
        "2.14.0.dev20260111",
        "2.15.0.dev20260112",
        "2.14.0.dev20260114",
    ]
    assert [b.listed for b in builds[:3]] == [False, False, True]
    text = "\n".join(notes)
    assert "2 nightly(ies) below the index listing's horizon (2026-01-10) found by their URLs" in text
    assert "no nightly on 2026-01-15 (bad end): ending at 2026-01-14" in text
    assert "2026-01-12: two nightlies that day; taking 2.15.0.dev20260112 (not 2.14.0.dev20260112)" in text
    _, notes = nightly_range(listed, dt.date(2026, 1, 9), dt.date(2026, 1, 14), exists=lambda url: False)
    assert any("no nightly on 2026-01-09 (good end): starting from 2026-01-10" in note for note in notes)


def test_hidden_names_keep_the_label_and_tags_of_the_template() -> None:
    template = nightly("2026-01-10", variant="cu126")
    hidden = hidden_candidate(template, dt.date(2026, 1, 2))
    assert hidden.filename == f"torch-2.14.0.dev20260102+cu126-{TAGS}.whl"
    assert hidden.url == f"{BASE}/nightly/cu126/torch-2.14.0.dev20260102%2Bcu126-{TAGS}.whl"
    assert nightly_date("2.14.0.dev20260102+cu126") == dt.date(2026, 1, 2) and nightly_date("2.13.0") is None


# ------------------------------------------------------------------ env keys


def old_key(request: EnvRequest) -> str:
    """The key as casekit computed it before channels (envs already built keep theirs)."""
    identity = json.dumps(
        {
            "python": request.python,
            "python_version": request.python_version,
            "torch": request.torch,
            "cuda": request.cuda,
            "index_url": request.effective_index_url,
            "find_links": request.find_links,
            "extra_packages": sorted(request.extra_packages),
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    parts = [f"torch-{request.torch}"] + ([request.cuda] if request.cuda else []) + [f"py{request.python_version}"]
    return "-".join([*parts, digest])


def test_the_env_key_holds_the_channel_and_variant_and_old_envs_keep_theirs() -> None:
    pypi = EnvRequest(None, "3.11", "2.5.1", find_links="/opt/wheels", extra_packages=("numpy",))
    assert pypi.key == old_key(pypi), "an env built before channels is reused, not rebuilt"
    cpu = EnvRequest(None, "3.11", "2.13.0", cuda="cpu", torch_index=f"{BASE}/cpu")
    nightly_cpu = EnvRequest(
        None, "3.11", "2.14.0.dev20260105", cuda="cpu", channel="nightly", torch_index=f"{BASE}/nightly/cpu"
    )
    same_nightly_by_url = EnvRequest(
        None,
        "3.11",
        "2.14.0.dev20260105",
        cuda="cpu",
        channel="nightly",
        torch_index=f"{BASE}/nightly/cpu",
        torch_url=f"{BASE}/nightly/cpu/x.whl",
    )
    test_cpu = EnvRequest(None, "3.11", "2.13.0", cuda="cpu", channel="test", torch_index=f"{BASE}/test/cpu")
    assert cpu.key.startswith("torch-2.13.0-cpu-py3.11-") and nightly_cpu.key.startswith(
        "torch-2.14.0.dev20260105-cpu-"
    )
    assert len({pypi.key, cpu.key, nightly_cpu.key, test_cpu.key}) == 4
    assert same_nightly_by_url.key == nightly_cpu.key, "a build found below the horizon is the same env"
    assert same_nightly_by_url.torch_requirement == f"torch @ {BASE}/nightly/cpu/x.whl"
    listed = EnvRequest(None, "3.11", "2.13.0", cuda="cpu", torch_file=f"torch-2.13.0+cpu-{TAGS}.whl")
    assert listed.torch_requirement == "torch==2.13.0+cpu", "only the file the listing chose matches"


# ------------------------------------------------------------------ nightly bisection's answer

PRE = "import torch\n\n\ndef f(x):\n    n = x.sum().item()\n    return x * n\n\n\nprint(torch.compile(f)(torch.ones(2)))\n"
POST = "import torch\n\n\ndef f(x):\n    return x * x.sum()\n\n\nprint(torch.compile(f)(torch.ones(2)))\n"


def item_break(line: int = 5) -> Site:
    return Site("repro.py", line, "f", "    n = x.sum().item()", "legacy:tensor.item", "Tensor.item")


def observed(*sites: Site, graphs: int = 2) -> ScriptObservation:
    return ScriptObservation(status=ScriptStatus.OK, graphs=graphs, sites=list(sites))


def make_case() -> Case:
    """Captured with one `.item()` break in the pre-fix and a post-fix that compiles to one graph."""
    return Case(
        id="item-case",
        title="item breaks",
        pre=ScriptSource("repro.py", sha256_text(PRE), PRE),
        post=ScriptSource("fixed.py", sha256_text(POST), POST),
        observations={"pre": observed(item_break()), "post": observed(graphs=1)},
    )


def nightly_history() -> dict[str, tuple[str, list]]:  # type: ignore[type-arg]
    """2.14.0.dev2026010N -> (its git_version, its pre-fix sites): the break moves on the 6th."""
    history = {}
    for day in range(1, 10):
        version = f"2.14.0.dev202601{day:02d}"
        history[version] = (f"{day:02d}" * 20, [item_break(line=6 if day >= 6 else 5)])
    return history


class NightlyReplay:
    """run_target at its interface, answering as nightlies do: the build's version and git commit."""

    def __init__(self) -> None:
        self.history = nightly_history()
        self.specs: list[TargetSpec] = []

    def __call__(
        self, spec: TargetSpec, cases: list, options: ReplayOptions, make_runner: RunnerFactory, progress: ProgressFn
    ) -> TargetRun:  # type: ignore[type-arg]
        self.specs.append(spec)
        assert spec.channel is Channel.NIGHTLY and spec.torch is not None
        sha, sites = self.history[spec.torch]
        environment = {"torch": f"{spec.torch}+cpu", "torch_git": sha}
        run = TargetRun(spec=spec, label=registry.label(spec), environment=environment)
        observations = {"pre": observed(*sites), "post": observed(graphs=1)}
        run.results = [classify_case(case, registry.label(spec), observations) for case in cases]
        return run


def test_nightly_bisection_names_both_commits_the_range_and_how_to_reproduce_each_side(tmp_path: Path) -> None:
    fake = NightlyReplay()
    asked: list[tuple[dt.date, dt.date]] = []

    def list_nightlies(spec: TargetSpec, good: dt.date, bad: dt.date) -> tuple[list[str], list[str]]:
        asked.append((good, bad))
        assert spec.channel is Channel.NIGHTLY
        return list(fake.history), ["no nightly on 2025-12-31 (good end): starting from 2026-01-01, the first after it"]

    config = ReleaseBisect(
        "2025-12-31",
        "2026-01-09",
        nightlies=True,
        predicate=Predicate.parse("verdict"),
        cache=CacheSettings(tmp_path / "cache.json"),
    )
    seams = ReleaseSeams(run_target=fake, make_runner=lambda spec: None, list_nightlies=list_nightlies)  # type: ignore[arg-type,return-value]
    report = bisect_releases(make_case(), config, seams)
    assert asked == [(dt.date(2025, 12, 31), dt.date(2026, 1, 9))]
    assert (report.last_good, report.first_bad) == ("2.14.0.dev20260105", "2.14.0.dev20260106")
    assert report.commits is not None
    assert (report.commits.good, report.commits.bad) == ("05" * 20, "06" * 20)
    assert report.commits.range == f"{'05' * 6}..{'06' * 6}"
    assert report.compare_url == f"https://github.com/pytorch/pytorch/compare/{'05' * 20}...{'06' * 20}"
    assert report.reproduce == "casekit replay --case item-case --torch nightly:2026-01-06 --no-record"
    assert report.reproduce_good == "casekit replay --case item-case --torch nightly:2026-01-05 --no-record"
    text = render_text(report)
    for line in (
        "note: no nightly on 2025-12-31 (good end): starting from 2026-01-01, the first after it",
        "first bad 2026-01-06 (2.14.0.dev20260106)",
        f"commits: {'05' * 6}..{'06' * 6} (torch.version.git_version of the two builds)",
        "reproduce the last good side with: casekit replay --case item-case --torch nightly:2026-01-05 --no-record",
    ):
        assert line in text, text
    write_report(report, tmp_path / "bisect.json")
    again = read_report(tmp_path / "bisect.json")
    assert again.commits == report.commits and again.notes == report.notes
    # a second bisection reads every step, and the commits, from the cache
    fake.specs.clear()
    second = bisect_releases(make_case(), config, seams)
    assert fake.specs == [] and second.commits == report.commits


def test_nightly_ends_must_be_dates_and_the_runner_must_provide_nightlies(tmp_path: Path) -> None:
    seams = ReleaseSeams(run_target=NightlyReplay(), list_nightlies=lambda spec, good, bad: ([], []))
    config = ReleaseBisect("2.13.0", "2026-01-09", nightlies=True, cache=CacheSettings(None))
    with pytest.raises(CasekitError, match="--good '2.13.0': with --nightlies, give a date"):
        bisect_releases(make_case(), config, seams)
    docker = ReleaseBisect("2026-01-01", "2026-01-09", nightlies=True, runner="docker", cache=CacheSettings(None))
    with pytest.raises(CasekitError, match="--runner docker cannot provide nightly builds"):
        bisect_releases(make_case(), docker, seams)


# ------------------------------------------------------------------ storage


def fake_env(envs: Path, key: str, used_days_ago: float, size: int = 4096) -> CachedEnv:
    path = envs / key
    (path / "bin").mkdir(parents=True)
    (path / "blob").write_bytes(b"x" * size)
    mark_used(path)
    when = dt.datetime.now().timestamp() - used_days_ago * 86400
    os.utime(envs / f"{key}.used", (when, when))
    return CachedEnv(key, path, None)


def test_an_age_is_a_number_and_a_unit() -> None:
    assert parse_age("30d") == dt.timedelta(days=30) and parse_age(" 12h ") == dt.timedelta(hours=12)
    assert parse_age("90min") == dt.timedelta(minutes=90) and parse_age("1.5w") == dt.timedelta(days=10.5)
    for bad in ("30", "d", "thirty days", "-3d", "3x"):
        with pytest.raises(CasekitError, match="--older-than takes an age such as 30d"):
            parse_age(bad)


def test_disk_usage_counts_a_hard_linked_file_once_and_knows_what_is_own(tmp_path: Path) -> None:
    cache, env = tmp_path / "uv", tmp_path / "env"
    cache.mkdir(), env.mkdir()
    (cache / "big").write_bytes(b"y" * (1 << 20))
    os.link(cache / "big", env / "big")  # how uv installs from its cache
    (env / "small").write_bytes(b"z" * 8192)
    both = disk_usage([cache, env])
    assert 1 << 20 <= both.total < (1 << 20) + 64 * 1024, "the linked file counts once"
    alone = disk_usage([env])
    assert alone.total >= 1 << 20 and alone.own < 64 * 1024, "the env alone owns only its unlinked file"


def test_prune_selects_by_age_and_count_and_clears_the_download_caches(tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    made = [fake_env(envs, f"torch-2.{n}.0-cpu-py3.11-0000000{n}", used_days_ago=n * 10) for n in range(1, 5)]
    by_age = select_for_pruning(made, older_than=dt.timedelta(days=25))
    assert sorted(e.key for e in by_age) == [made[2].key, made[3].key]
    by_count = select_for_pruning(made, keep=3)
    assert [e.key for e in by_count] == [made[3].key], "the least recently used goes"
    both = select_for_pruning(made, keep=1, older_than=dt.timedelta(days=25))
    assert sorted(e.key for e in both) == [made[2].key, made[3].key]
    with pytest.raises(CasekitError, match="--older-than AGE, --keep N or --all"):
        select_for_pruning(made)
    (tmp_path / "uv" / "wheels").mkdir(parents=True)
    (tmp_path / "uv" / "wheels" / "torch.whl").write_bytes(b"w" * (1 << 20))
    result = prune_envs(tmp_path, keep=2)
    assert result.removed == [made[2].key, made[3].key] and sorted(result.kept) == [made[0].key, made[1].key]
    assert not (tmp_path / "uv").exists() and not (envs / f"{made[3].key}.used").exists()
    assert result.freed >= (1 << 20) + 2 * 4096 and result.freed == result.before - result.after
    everything = prune_envs(tmp_path, everything=True)
    assert sorted(everything.removed) == [made[0].key, made[1].key] and list(envs.iterdir()) == [
        p for p in envs.iterdir() if p.name.endswith(".lock")
    ]


@pytest.mark.process
def test_with_the_users_uv_cache_the_figures_are_where_the_bytes_are(tmp_path: Path) -> None:
    """UV_CACHE_DIR set: uv keeps its cache there and the envs hardlink into it. `envs list` shows that
    cache's size (it said 0 B), and `envs prune --all` says what really went: the envs' own files, not
    the bytes they share with the cache that stays (it said 996.5 MB where 152.6 MB went). That cache is
    the user's: it stays, and the line says so and how to clear it."""
    cache, users = tmp_path / "casekit", tmp_path / "users-uv"
    (users / "wheels").mkdir(parents=True)
    (users / "wheels" / "torch.so").write_bytes(b"t" * (4 << 20))  # what uv unpacked once
    env = fake_env(cache / "envs", "torch-2.13.0-cpu-py3.11-00000001", used_days_ago=1)
    os.link(users / "wheels" / "torch.so", env.path / "torch.so")  # how uv installs from its cache
    (env.path / "own.py").write_bytes(b"o" * (1 << 20))  # a file of the env's own
    variables = {"CASEKIT_CACHE": str(cache), "UV_CACHE_DIR": str(users)}
    listed = run_casekit("envs", "list", env=variables)
    assert listed.returncode == 0, listed.stderr
    assert f"download cache (uv): 4.2 MB in {users} (yours, $UV_CACHE_DIR: left alone)" in listed.stdout, listed.stdout
    pruned = run_casekit("envs", "prune", "--all", env=variables)
    assert pruned.returncode == 0, pruned.stderr
    freed = re.search(r"freed ([\d.]+) (KB|MB)", pruned.stdout)
    assert freed and freed.group(2) == "MB" and 1.0 <= float(freed.group(1)) < 1.2, (
        pruned.stdout
    )  # own.py, not torch.so
    assert f"left uv's cache {users} alone (4.2 MB): $UV_CACHE_DIR names it" in pruned.stdout, pruned.stdout
    assert "`uv cache clean` clears it" in pruned.stdout
    assert (users / "wheels" / "torch.so").is_file() and not env.path.exists()
