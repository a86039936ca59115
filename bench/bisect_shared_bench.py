"""Bisection benchmark: k cases over n releases, one by one vs shared; commit bisection fresh vs warm probe.

Release bisection (venv runner, real envs, real torch):
- per-case: `bisect_releases` for each case in turn (what `casekit bisect ID` did
  for each case), every envs build counted and timed;
- shared: `bisect_releases_many` over the same cases (`casekit bisect --all`):
  one round per release, one probe batch for every case needing it, envs built
  ahead of need.
Cold: a fresh casekit cache folder (envs built), reusing uv's download cache
(so a build is a link farm plus an import check, not a 5 GB download). Warm:
the envs of the cold run, a fresh bisection record cache (everything re-runs).

Commit bisection: 8 generated commits, a probe per commit (today) vs one warm
probe for all of them (`probe.py --serve`), same answer checked.

    PYTHONPATH=$PWD python3 bench/bisect_shared_bench.py [--versions 2.5.1,2.8.0,2.13.0] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from casekit.archive.store import Archive
from casekit.bisect.commits import CommitBisect, bisect_commits
from casekit.bisect.engine import CacheSettings
from casekit.bisect.predicates import CommitPredicate
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases
from casekit.bisect.shared import Ahead, bisect_releases_many

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = "item-branch,tensor-if,numpy-tolist,print-in-forward"
REAL_CACHE = Path(os.environ.get("CASEKIT_CACHE") or "~/.cache/casekit").expanduser()


def envs_built(root: Path) -> list[tuple[str, float]]:
    """The complete envs in a cache folder, with the build seconds their markers recorded."""
    built = []
    for marker in sorted((root / "envs").glob("*/casekit-env.json")):
        data = json.loads(marker.read_text())
        built.append((str(data.get("key")), float(data.get("build_s") or 0.0)))
    return built


def log_to(path: Path):  # type: ignore[no-untyped-def]
    handle = path.open("a")

    def progress(message: str) -> None:
        handle.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        handle.flush()

    return progress


def release_scenario(mode: str, cases, config: ReleaseBisect, progress) -> dict:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    if mode == "per-case":
        answers = {}
        for case in cases:
            report = bisect_releases(case, config, ReleaseSeams(progress=progress))
            answers[case.id] = (report.first_bad, report.evaluated)
        batches = sum(n for _, n in answers.values())
        firsts = {k: v[0] for k, v in answers.items()}
    else:
        shared = bisect_releases_many(cases, config, ReleaseSeams(progress=progress), Ahead(limit=2, min_free_gib=5))
        batches = shared.stats.batches
        firsts = {k: r.first_bad for k, r in shared.reports.items()}
        firsts.update({k: f"error: {e}" for k, e in shared.errors.items()})
    return {"seconds": round(time.monotonic() - started, 1), "probe_batches": batches, "first_bad": firsts}


def bench_releases(args: argparse.Namespace, work: Path, progress) -> dict:  # type: ignore[no-untyped-def]
    archive = Archive(ROOT / "cases")
    cases = archive.load_all(args.cases.split(","))
    versions = args.versions.split(",")
    os.environ.setdefault("UV_CACHE_DIR", str(REAL_CACHE / "uv"))  # reuse downloads, not envs
    results: dict[str, dict] = {}
    for mode in ("per-case", "shared"):
        # a cold cache folder on the uv cache's disk, so uv hardlinks as it does for users
        cold = Path(tempfile.mkdtemp(prefix=f"bench-{mode}-", dir=REAL_CACHE.parent))
        os.environ["CASEKIT_CACHE"] = str(cold)
        try:
            for temperature in ("cold", "warm"):
                config = ReleaseBisect(
                    versions[0],
                    versions[-1],
                    versions=versions,
                    backend="eager",
                    timeout=120,
                    cache=CacheSettings(work / f"records-{mode}-{temperature}.json"),
                )
                progress(f"=== {mode} {temperature}")
                before = {key for key, _ in envs_built(cold)}
                outcome = release_scenario(mode, cases, config, progress)
                new = [(key, s) for key, s in envs_built(cold) if key not in before]
                outcome["envs_built"] = len(new)
                outcome["env_build_s"] = round(sum(s for _, s in new), 1)
                outcome["envs"] = [key for key, _ in new]
                results[f"{mode} {temperature}"] = outcome
                print(f"{mode:>8} {temperature}: {outcome}", flush=True)
        finally:
            os.environ.pop("CASEKIT_CACHE", None)
            shutil.rmtree(cold, ignore_errors=True)
    for temperature in ("cold", "warm"):
        per, shared = results[f"per-case {temperature}"], results[f"shared {temperature}"]
        results[f"ratio {temperature}"] = {"shared/per-case": round(shared["seconds"] / per["seconds"], 2)}
        assert per["first_bad"] == shared["first_bad"], (per["first_bad"], shared["first_bad"])
    return results


SCRIPT = (
    "import torch\n\n\ndef step(x):\n    y = torch.sin(x)\n    z = y * 2\n{extra}    return z + 1\n\n\n"
    "print(torch.compile(step, backend='eager')(torch.ones(3)).sum().item())\n"
)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid"}
    env.update(GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.invalid", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def bench_commits(work: Path, progress) -> dict:  # type: ignore[no-untyped-def]
    repo = work / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(8):
        extra = "    print('debug', z.shape)\n" if i >= 5 else ""
        (repo / "model.py").write_text(SCRIPT.format(extra=extra) + f"# revision {i}\n")
        git(repo, "add", "model.py")
        git(repo, "commit", "-q", "-m", f"revision {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    results = {}
    for name, warm in (("fresh probe per commit", False), ("one warm probe", True)):
        config = CommitBisect(
            repo,
            shas[0],
            shas[-1],
            [sys.executable, "model.py"],
            judge=CommitPredicate(site="model.py:7"),
            cache=CacheSettings(None),
            warm=warm,
        )
        started = time.monotonic()
        report = bisect_commits(config, progress=progress)
        seconds = time.monotonic() - started
        results[name] = {"seconds": round(seconds, 1), "steps": len(report.steps), "first_bad": report.first_bad}
        print(f"commits, {name}: {results[name]}", flush=True)
    fresh, warm_run = results["fresh probe per commit"], results["one warm probe"]
    assert fresh["first_bad"] == warm_run["first_bad"] == shas[5]
    results["speed-up"] = {"fresh/warm": round(fresh["seconds"] / warm_run["seconds"], 2)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--versions", default="2.5.1,2.8.0,2.13.0")
    parser.add_argument("--skip-releases", action="store_true")
    parser.add_argument("--skip-commits", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--log", type=Path, default=Path("bisect-bench.log"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="casekit-bisect-bench-"))
    progress = log_to(args.log)
    figures: dict[str, dict] = {}
    try:
        if not args.skip_commits:
            figures["commits"] = bench_commits(work, progress)
        if not args.skip_releases:
            figures["releases"] = bench_releases(args, work, progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
