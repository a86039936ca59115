"""Torch channels for real: a PyTorch-shaped index on 127.0.0.1 (tests/torch_index.py), envs built through
the real uv path, the probe run in the sandbox, `casekit replay` and `casekit bisect` as a user types them.

No PyTorch index is reachable from these machines, so the index serves the real local torch 2.13.0 CPU
wheel, inert CUDA builds (only their names matter), and generated nightlies: the real torch of this
interpreter under a nightly's name, whose `torch.version.git_version` is a commit of a test repository and
whose behaviour is keyed on its date (from FIXED_FROM on, Dynamo captures scalar outputs, so the case's
`Tensor.item()` break is gone).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from casekit.runners.interface import TargetSpec
from casekit.runners.venv import VenvRunner
from casekit.runners.venv.cache import bytecode_counts, disk_usage
from casekit.runners.venv.resolve import IndexSeams, resolve_request
from tests.conftest import ROOT, run_casekit
from tests.torch_index import PLATFORM_TAG, REAL_CPU_WHEEL, Nightly, TorchIndex, dependency_sites, downloaded, serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not REAL_CPU_WHEEL.is_file(), reason=f"no local torch wheel at {REAL_CPU_WHEEL}"),
]

FIRST = dt.date(2026, 1, 1)
DAYS = 66
MISSING = {dt.date(2026, 1, 3), dt.date(2026, 1, 13)}  # no build those days
TWO_BUILDS = dt.date(2026, 1, 20)  # the version moves on: 2.14.0.dev and 2.15.0.dev that day, 2.15.0.dev after
FIXED_FROM = dt.date(2026, 1, 16)  # the first date whose build has no `.item()` break
LISTED = 60  # PyTorch's listing shows the newest 60 files of a package

REPRO = """\
import torch


def scale(x):
    total = x.sum().item()
    return x * total


print(torch.compile(scale, backend="eager")(torch.ones(3)))
"""


def quiet(_line: str) -> None:
    pass


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache of its own, and no wheel folder beside the index (PIP_FIND_LINKS would serve torch itself)."""
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("CASEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CASEKIT_INSTALLER", "uv")
    return tmp_path / "cache"


def test_a_cpu_host_installs_the_cpu_build_with_bytecode_and_cuda_is_only_on_request(
    hermetic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU build of `--torch 2.13` on a host with no GPU; then the same env for `--torch 2.13+cpu`
    (a build label asks for its variant: `replay --torch 2.13+cpu` was a ValueError traceback, two "exact
    version" rules disagreeing), one line for a label the index lacks or --cuda contradicts; and with
    PyTorch's index gone, the env built from it still serves, with no word of PyPI's build."""
    index = TorchIndex(tmp_path / "index")
    index.add_real_cpu_wheel()
    index.add_inert("cpu", "2.12.0+cpu")  # an older release the prefix 2.13 must not pick
    cuda = index.add_inert("cu124", "2.13.0+cu124")
    env = {"CASEKIT_TORCH_INDEX": "", "CASEKIT_CACHE": str(hermetic)}
    seams = IndexSeams(gpu_here=False)
    with serving(index):
        monkeypatch.setenv("CASEKIT_TORCH_INDEX", index.url)
        env["CASEKIT_TORCH_INDEX"] = index.url
        lines: list[str] = []
        runner = VenvRunner(TargetSpec("venv", torch="2.13"), cache_dir=hermetic, index_seams=seams)
        runner.prepare(lines.append)
        # the same request once a GPU or --cuda says so: the CUDA file (resolution only: it is inert)
        on_request = resolve_request(TargetSpec("venv", torch="2.13", cuda="cu124"), hermetic, "uv", quiet, seams)
        labelled = resolve_request(TargetSpec("venv", torch="2.13+cpu"), hermetic, "uv", quiet, seams)
        as_cuda = resolve_request(TargetSpec("venv", torch="2.13+cu124"), hermetic, "uv", quiet, seams)
        replays = {
            name: run_casekit(
                "replay", "--archive", str(ROOT / "cases"), "--case", "item-branch", *flags, "--no-record",
                "--json", str(tmp_path / f"{name}.json"), env=env,
            )
            for name, flags in (
                ("labelled", ("--torch", "2.13+cpu")),
                ("missing", ("--torch", "2.12+cu124")),
                ("contradicted", ("--torch", "2.13+cpu", "--cuda", "cu124")),
            )
        }  # fmt: skip
    assert runner.env is not None
    assert downloaded(index) == [REAL_CPU_WHEEL.name], index.requests
    assert f"GET /whl/cpu/{REAL_CPU_WHEEL.name}.metadata" in index.requests or any(
        r.startswith("GET /whl/cpu/torch/") for r in index.requests
    )
    note = f"torch 2.13.0 ({REAL_CPU_WHEEL.name}): a CPU build (no --cuda; no GPU here, and breaks trace on CPU)"
    assert any(line.startswith(note) for line in lines), lines
    assert "--cuda cu126 asks for a CUDA build" in next(line for line in lines if line.startswith(note))
    marker = json.loads((runner.env.path / "casekit-env.json").read_text())
    assert marker["torch_file"] == REAL_CPU_WHEEL.name
    assert marker["torch"] == "2.13.0+cpu"
    counts = marker["bytecode"]
    assert counts == bytecode_counts(runner.env.path) and counts["pyc"] >= 0.99 * counts["py"] > 1000, counts
    assert "-cpu-" in runner.env.key
    assert on_request.torch_file == cuda.name and on_request.cuda == "cu124"
    assert on_request.key != runner.env.key, "channel and variant are part of the env's key"
    assert labelled.key == runner.env.key and labelled.torch_file == REAL_CPU_WHEEL.name  # one env for both
    assert as_cuda.torch_file == cuda.name and as_cuda.cuda == "cu124"

    said = {asked: done.stdout + done.stderr for asked, done in replays.items()}
    assert not any("Traceback" in out for out in said.values()), said
    assert replays["labelled"].returncode in (0, 1), said["labelled"]
    target = json.loads((tmp_path / "labelled.json").read_text())["targets"][0]
    assert target["torch"] == "2.13.0+cpu" and not target.get("error"), target
    assert f"reusing env {runner.env.key}" in said["labelled"]
    missing = f"no torch 2.12+cu124 at {index.url}/cu124 (python 3.11): it has 2.13.0+cu124"
    assert replays["missing"].returncode == 2 and missing in said["missing"]
    contradicted = "--torch 2.13+cpu names the cpu build, --cuda cu124 another: give one of them"
    assert replays["contradicted"].returncode == 2 and contradicted in said["contradicted"]

    # the index is gone now (a network without PyTorch's index): the env built from it serves, silently
    # about PyPI, whose build nobody is about to download
    offline: list[str] = []
    again = resolve_request(TargetSpec("venv", torch="2.13"), hermetic, "uv", offline.append, seams)
    assert again.key == runner.env.key, offline
    assert not any("PyPI" in line for line in offline), offline
    assert any("reusing the cpu env built before" in line for line in offline), offline


@pytest.fixture(scope="module")
def nightlies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TorchIndex, dict[dt.date, str], Path]]:
    """A nightly index of DAYS dates (MISSING absent, TWO_BUILDS twice), its oldest below the listing's
    horizon; each build's git_version a commit of `repo` (one commit a day)."""
    root = tmp_path_factory.mktemp("nightly-index")
    repo = root / "pytorch"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    index = TorchIndex(root / "index", listed=LISTED)
    commits: dict[dt.date, str] = {}
    for day in range(DAYS):
        date = FIRST + dt.timedelta(days=day)
        (repo / "CHANGES").write_text(f"{date}\n")
        git(repo, "add", "CHANGES")
        git(repo, "commit", "-q", "-m", f"the change of {date}")
        commits[date] = git(repo, "rev-parse", "HEAD")
        if date in MISSING:
            continue
        fixed = date >= FIXED_FROM
        if date <= TWO_BUILDS:
            index.add_nightly(Nightly(date, "2.14.0", commit=commits[date]), fixed=fixed)
        if date >= TWO_BUILDS:
            index.add_nightly(Nightly(date, "2.15.0", commit=commits[date]), fixed=fixed)
    with serving(index):
        yield index, commits, repo


def capture_case(archive: Path, tmp_path: Path) -> None:
    (tmp_path / "repro.py").write_text(REPRO)
    fixed = REPRO.replace("    total = x.sum().item()\n    return x * total", "    return x * x.sum()")
    (tmp_path / "fixed.py").write_text(fixed)
    captured = run_casekit(
        "capture",
        str(tmp_path / "repro.py"),
        "--fixed",
        str(tmp_path / "fixed.py"),
        "--id",
        "item-case",
        "--title",
        "a Tensor.item() break",
        "--archive",
        str(archive),
    )
    assert captured.returncode == 0, captured.stdout + captured.stderr


def test_bisect_nightlies_rolls_over_fetches_hidden_builds_and_names_the_commit_range(
    nightlies: tuple[TorchIndex, dict[dt.date, str], Path], hermetic: Path, tmp_path: Path
) -> None:
    index, commits, repo = nightlies
    listing = index.page("nightly/cpu", "torch")
    assert listing is not None and listing.count(b"<a ") == LISTED
    assert b"%2Bcpu" in listing and b"#sha256=" not in listing, "nightly links: quoted, no hash fragment"
    names = sorted(wheel.name for wheel in index.wheels)
    hidden = names[:-LISTED]  # the oldest five: 01-01, 01-02, 01-04, 01-05, 01-06
    assert len(hidden) == 5 and all(name.encode() not in listing for name in hidden)
    archive = tmp_path / "cases"
    capture_case(archive, tmp_path)
    env = {"CASEKIT_TORCH_INDEX": index.url, "CASEKIT_CACHE": str(hermetic)}
    good, bad = "2026-01-03", "2026-01-22"  # no build on the 3rd: the good end rolls to the 4th, below the horizon
    index.requests.clear()
    command = ["bisect", "item-case", "--nightlies", "--good", good, "--bad", bad, "--torch-repo", str(repo)]
    command += ["--archive", str(archive), "--json", str(tmp_path / "bisect.json"), "--cache", str(tmp_path / "c.json")]
    # the fake nightlies import this interpreter's real torch from its site folder: the sandbox shows it when asked,
    # as it would a user's (bisect takes replay's --allow)
    command += [f"--allow=read={folder}" for folder in dependency_sites()]
    result = run_casekit(*command, env=env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    report = json.loads((tmp_path / "bisect.json").read_text())
    last_good, first_bad = FIXED_FROM - dt.timedelta(days=1), FIXED_FROM
    assert report["last_good"] == f"2.14.0.dev{last_good:%Y%m%d}"
    assert report["first_bad"] == f"2.14.0.dev{first_bad:%Y%m%d}"
    commits_found = report["commits"]
    assert (commits_found["good"], commits_found["bad"]) == (commits[last_good], commits[first_bad])
    assert (
        report["compare_url"]
        == f"https://github.com/pytorch/pytorch/compare/{commits[last_good]}...{commits[first_bad]}"
    )
    assert commits_found["log"] == [f"{commits[first_bad][:7]} the change of {first_bad}"]
    assert "note: no nightly on 2026-01-03 (good end): starting from 2026-01-04, the first after it" in out
    assert "below the index listing's horizon" in out
    two = "2026-01-20: two nightlies that day; taking 2.15.0.dev20260120 (not 2.14.0.dev20260120)"
    assert two in out, "the day the version moves on: the higher build"
    assert f"commits: {commits[last_good][:12]}..{commits[first_bad][:12]}" in out
    assert report["reproduce_good"].startswith(f"casekit replay --case item-case --torch nightly:{last_good} ")
    assert report["reproduce"].startswith(f"casekit replay --case item-case --torch nightly:{first_bad} ")
    # the terminal names the archive where it is (a command to paste); the JSON, shared, keeps no machine path
    for side, key in (("last unfixed", "reproduce_good"), ("first fixed", "reproduce")):
        shown_here = report[key].replace(report[key].split("--archive ")[1].split()[0], str(archive))
        assert f"reproduce the {side} side with: {shown_here}" in out, out
        assert str(tmp_path) not in report[key]
    # the builds below the horizon were found by HEAD at their URLs, and installed from there
    for name in hidden[2:]:  # those in the range
        assert f"HEAD /whl/nightly/cpu/{name}" in index.requests, index.requests
    assert hidden[2] in downloaded(index), "the good end is a hidden build: fetched by its direct URL"
    assert f"torch-2.14.0.dev20260103+cpu-{PLATFORM_TAG}.whl" not in downloaded(index)
    # each side reproduces with the command printed, and `--torch nightly` is the newest date
    shown = run_casekit(
        "replay",
        "--case",
        "item-case",
        "--torch",
        f"nightly:{last_good}",
        "--archive",
        str(archive),
        "--no-record",
        env=env,
    )
    assert f"2.14.0.dev{last_good:%Y%m%d}" in shown.stdout + shown.stderr, shown.stdout + shown.stderr
    newest = run_casekit(
        "replay", "--case", "item-case", "--torch", "nightly", "--archive", str(archive), "--no-record", env=env
    )
    newest_date = FIRST + dt.timedelta(days=DAYS - 1)
    assert f"torch 2.15.0.dev{newest_date:%Y%m%d}" in newest.stdout + newest.stderr, newest.stdout + newest.stderr

    # what it all cost on disk, seen and reclaimed: `envs list` sizes, `envs prune` by count, then all
    listed = run_casekit("envs", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    built = sorted(path.name for path in (hermetic / "envs").iterdir() if path.is_dir())
    assert len(built) >= 4 and all(key in listed.stdout for key in built), listed.stdout
    assert "size" in listed.stdout and "last use" in listed.stdout and "download cache (uv): " in listed.stdout
    before = disk_usage([hermetic]).total
    kept = run_casekit("envs", "prune", "--keep", "2", env=env)
    assert kept.returncode == 0, kept.stderr
    assert f"removed {len(built) - 2} env(s), kept 2 and cleared the download caches: freed " in kept.stdout
    assert len([path for path in (hermetic / "envs").iterdir() if path.is_dir()]) == 2
    assert not (hermetic / "uv").exists()
    gone = run_casekit("envs", "prune", "--all", env=env)
    assert gone.returncode == 0 and "removed 2 env(s), kept 0" in gone.stdout, gone.stdout + gone.stderr
    after = disk_usage([hermetic]).total
    print(f"\nenvs prune: {before} bytes on disk under the cache before, {after} after")
    assert after < 256 * 1024 < before, "everything casekit built or downloaded is reclaimed"
