"""A real `casekit bisect` over real torch releases, in managed venvs, through the command line.

Issue 5's "done when": a bisection over torch releases installed here names
the right release for a case that changes between them, and resumes from the
cache without re-running a step.

The case is examples/versions/cond-identity-branch, captured here on torch
2.5.1: its post-fix (a torch.cond whose false branch returns its operand) is
one graph on 2.5.1, and from 2.13.0 on torch.cond rejects the aliasing branch
(UncapturedHigherOrderOpError), so the fix no longer holds. The candidates
are 2.5.1, 2.13.0 and 2.14.1, each a managed venv (`--runner venv`) in the
default env cache (`~/.cache/casekit/envs` or $CASEKIT_CACHE): 2.5.1 and
2.14.1 come from PyPI, 2.13.0 from the local CPU wheel; each is built on
first use and reused after. Only the bisection's result cache is a temporary
file (`--cache`), so the first bisection really evaluates every step.

Measured on this 2-core box (shared, load 5-11): with the envs built, about
50 s in all (capture ~14 s, first bisection ~37 s, resumed <1 s); from an
empty env cache (uv's download cache warm) about 135 s, the env builds
included (2.5.1 38 s, 2.14.1 23 s, 2.13.0 7 s).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from casekit.scrub import portable_paths
from tests.conftest import ROOT, run_casekit

CASE = "cond-identity-branch"
EXAMPLE = ROOT / "examples" / "versions" / CASE
GOOD, MIDDLE, BAD = "2.5.1", "2.13.0", "2.14.1"


@pytest.mark.slow
@pytest.mark.torch251
def test_real_bisection_over_torch_releases_names_the_release_and_resumes_from_cache(
    tmp_path: Path, torch251_python: str
) -> None:
    archive, cache = tmp_path / "cases", tmp_path / "bisect-cache.json"

    # 1. capture the case on torch 2.5.1, where the fix holds (the env bisect uses for its good end)
    started = time.monotonic()
    captured = run_casekit(
        "capture",
        str(EXAMPLE / "repro.py"),
        "--fixed",
        str(EXAMPLE / "fixed.py"),
        "--id",
        CASE,
        "--title",
        "torch.cond fix with an identity branch",
        "--python",
        torch251_python,
        "--archive",
        str(archive),
    )
    assert captured.returncode == 0, captured.stdout + captured.stderr
    bundle = archive / f"{CASE}.toml"
    assert bundle.exists()
    capture_s = time.monotonic() - started

    command = [
        "bisect",
        CASE,
        "--good",
        GOOD,
        "--bad",
        BAD,
        "--versions",
        f"{GOOD},{MIDDLE},{BAD}",
        "--runner",
        "venv",
        "--archive",
        str(archive),
        "--cache",
        str(cache),
    ]

    # 2. the first bisection runs every step for real (builds any env it lacks)
    started = time.monotonic()
    first = run_casekit(*command, "--json", str(tmp_path / "first.json"), timeout=1800)
    first_s = time.monotonic() - started
    assert first.returncode == 0, first.stdout + first.stderr
    log, out = first.stderr, first.stdout
    report = json.loads((tmp_path / "first.json").read_text())

    # both ends first, then the one release in between
    assert (
        log.index(f"checking the good end {GOOD}")
        < log.index(f"checking the bad end {BAD}")
        < log.index(f"trying {MIDDLE}")
    )
    assert [step["target"] for step in report["steps"]] == [GOOD, BAD, MIDDLE]
    assert [(step["ran"], step["cached"]) for step in report["steps"]] == [(True, False)] * 3
    assert all(step["outcome"] != "unknown" for step in report["steps"]), report["steps"]

    # the culprit: 2.13.0 is the first release where the case stops behaving as captured
    assert report["schema"] == "casekit.bisect/1" and report["kind"] == "versions" and report["runner"] == "venv"
    assert report["searched"] == {"from": GOOD, "to": BAD, "candidates": [GOOD, MIDDLE, BAD]}
    assert (report["last_good"], report["first_bad"], report["exact"], report["ambiguous"]) == (GOOD, MIDDLE, True, [])
    assert report["good_outcome"] == "unchanged", "captured on 2.5.1, so 2.5.1 replays as recorded"
    assert report["bad_outcome"] == "fix_broken", "the post-fix no longer holds"
    outcomes = {step["target"]: step["outcome"] for step in report["steps"]}
    assert outcomes[MIDDLE] == outcomes[BAD] == report["bad_outcome"]

    # what changed: the post-fix stops holding (torch.cond rejects the aliasing identity branch)
    changes = "\n".join(report["changes"])
    assert (report["baseline"], report["verdict"], report["result"]) == (GOOD, "fix_broken", "regression")
    # eager_failed: even uncompiled, torch.cond compiles its branches, so the probe's eager baseline raises too
    assert re.search(
        rf"^post-fix: ok on {GOOD} -> (eager_failed|compile_error) on {MIDDLE}: .*UncapturedHigherOrderOpError",
        changes,
        re.M,
    ), changes
    assert "post-fix: 1 -> 0 graph(s)" in changes
    reproduce = f"casekit replay --case {CASE} --torch {MIDDLE} --archive {archive} --no-record"
    # the document is shared: its command names the archive as a label does (~/..., or …/its last parts)
    assert report["reproduce"] == portable_paths(reproduce)
    assert report["compare_url"] == f"https://github.com/pytorch/pytorch/compare/v{GOOD}...v{MIDDLE}"
    assert report["cache"] == str(cache) and cache.exists()

    # bisect's "what changed" is replay's classification of the same two runs
    replayed = run_casekit(
        "replay",
        "--case",
        CASE,
        "--torch",
        MIDDLE,
        "--runner",
        "venv",
        "--archive",
        str(archive),
        "--no-record",
        "--json",
        str(tmp_path / "replay.json"),
        "--fail-on",
        "never",
        timeout=900,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    [result] = json.loads((tmp_path / "replay.json").read_text())["results"]
    replay_classes = [
        (which, site["class"], site["note"])
        for which, script in result["scripts"].items()
        if script
        for site in script["sites"]
    ]
    assert [(s["script"], s["site_class"], s["note"]) for s in report["sites"]] == replay_classes
    # the same reasons, less replay's line that the release is the one difference: a bisection varies nothing else
    alone = [r for r in result["reasons"] if not r.endswith("the only difference from the recording")]
    assert (report["verdict"], report["reasons"]) == (result["verdict"], alone), (report["reasons"], result["reasons"])

    # the printed report says the same
    assert f"regression in {MIDDLE}" in out and f"last good {GOOD}" in out and f"first bad {MIDDLE}" in out
    assert f"what changed from {GOOD} (good end) to {MIDDLE}:" in out and f"reproduce with: {reproduce}" in out
    assert "3 step(s): 3 run, 0 from the cache" in out

    # 3. the same command again: every step comes from the cache, nothing is run or built
    started = time.monotonic()
    again = run_casekit(*command, "--json", str(tmp_path / "again.json"), timeout=600)
    again_s = time.monotonic() - started
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = json.loads((tmp_path / "again.json").read_text())
    assert [(step["target"], step["ran"], step["cached"]) for step in resumed["steps"]] == [
        (GOOD, False, True),
        (BAD, False, True),
        (MIDDLE, False, True),
    ]
    assert [step["outcome"] for step in resumed["steps"]] == [step["outcome"] for step in report["steps"]]
    assert (resumed["last_good"], resumed["first_bad"], resumed["changes"]) == (GOOD, MIDDLE, report["changes"])
    assert "3 step(s): 0 run, 3 from the cache" in again.stdout
    assert "installing torch" not in again.stderr and "creating venv" not in again.stderr
    assert again.stderr.count("[cached]") == 3

    print(
        f"\ncapture on {GOOD}: {capture_s:.1f} s; bisection: first {first_s:.1f} s, resumed {again_s:.1f} s",
        file=sys.stderr,
    )
