"""Bisecting k cases over n releases: one by one vs one shared bisection, side by side.

- per-case: `casekit bisect CASE --good G --bad B --versions V` for each case, one
  after another (each builds, checks and imports the release envs it needs);
- shared: one `casekit bisect` over all the cases (`--all` / several ids), which
  builds each needed release env once. SHARED MODE HOOK: see `shared_command`;
  while the installed casekit has no such option the mode is skipped with a note.

Each mode runs with the bisection result cache off (`--no-cache`), so every step
really runs. Env builds are counted and timed from casekit's own progress lines
("creating venv", "env ... ready (N s)"). --cold gives each mode an empty
CASEKIT_CACHE (envs built from scratch; uv's cache beside them starts empty too),
--warm (the default) uses the existing one, so the envs of earlier runs are reused.

Example (the env builds take minutes):
    python bench/bisect_bench.py --archive cases --cases item-branch,tensor-if \\
        --good 2.5.1 --bad 2.13.0 --versions 2.5.1,2.6.0,2.7.1,2.13.0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILT = re.compile(r"env \S+ ready: .*\((\d+(?:\.\d+)?) s\)")


@dataclass
class ModeResult:
    """What one mode took: wall time, env builds, each case's answer."""

    mode: str
    seconds: float = 0.0
    env_builds: int = 0
    build_seconds: float = 0.0
    reused_envs: int = 0
    answers: dict[str, str | None] = field(default_factory=dict)  # case -> first bad version
    skipped: str = ""


def casekit(args: list[str], cache: Path | None) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if cache is not None:
        env["CASEKIT_CACHE"] = str(cache)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "casekit", *args], capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - started, done


def count_builds(stderr: str, into: ModeResult) -> None:
    into.env_builds += stderr.count("creating venv ")
    into.build_seconds += sum(float(seconds) for seconds in BUILT.findall(stderr))
    into.reused_envs += stderr.count("reusing env ")


def common_args(args: argparse.Namespace) -> list[str]:
    out = ["--good", args.good, "--bad", args.bad, "--archive", args.archive, "--no-cache"]
    if args.versions:
        out += ["--versions", args.versions]
    if args.runner:
        out += ["--runner", args.runner]
    return out


def first_bad(report: Path) -> str | None:
    try:
        return json.loads(report.read_text()).get("first_bad")
    except (OSError, ValueError):
        return None


def per_case(args: argparse.Namespace, cases: list[str], cache: Path | None, work: Path) -> ModeResult:
    result = ModeResult("per-case")
    for case_id in cases:
        report = work / f"per-case-{case_id}.json"
        seconds, done = casekit(["bisect", case_id, *common_args(args), "--json", str(report)], cache)
        result.seconds += seconds
        count_builds(done.stderr, result)
        if done.returncode not in (0, 1):
            print(f"  per-case {case_id}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        result.answers[case_id] = first_bad(report)
    return result


def shared_supported() -> bool:
    """SHARED MODE HOOK: does this casekit bisect several cases in one run (`bisect --all`)?"""
    _, done = casekit(["bisect", "--help"], None)
    return "--all" in done.stdout


def shared_command(cases: list[str], args: argparse.Namespace, report: Path) -> list[str]:
    """SHARED MODE HOOK: the one command that bisects all `cases` together.

    Written against the interface issue 14 asks for (`casekit bisect --all`, or several
    ids); adjust here if the shipped options differ. Its --json is expected to hold one
    casekit.bisect/1 report per case, under "cases" (or a list of reports).
    """
    return ["bisect", *cases, *common_args(args), "--json", str(report)]


def shared_answers(report: Path) -> dict[str, str | None]:
    """SHARED MODE HOOK: each case's first bad version from the shared run's --json."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return {}
    reports = data.get("cases", data) if isinstance(data, dict) else data
    if isinstance(reports, dict):
        return {str(case): item.get("first_bad") for case, item in reports.items() if isinstance(item, dict)}
    return {str(item.get("subject")): item.get("first_bad") for item in reports if isinstance(item, dict)}


def shared(args: argparse.Namespace, cases: list[str], cache: Path | None, work: Path) -> ModeResult:
    result = ModeResult("shared")
    if not shared_supported():
        result.skipped = "`casekit bisect --all` is not available in this casekit yet: shared mode skipped"
        return result
    report = work / "shared.json"
    result.seconds, done = casekit(shared_command(cases, args, report), cache)
    count_builds(done.stderr, result)
    if done.returncode not in (0, 1):
        print(f"  shared: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    result.answers = shared_answers(report)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", default="cases")
    parser.add_argument(
        "--cases", default=None, help="comma-separated case ids [default: the first --k of the archive]"
    )
    parser.add_argument("--k", type=int, default=2, help="how many cases when --cases is not given")
    parser.add_argument("--good", default="2.5.1")
    parser.add_argument("--bad", default="2.13.0")
    parser.add_argument("--versions", default=None, help="the n candidate releases ('a,b,c' or a file)")
    parser.add_argument("--runner", default=None)
    parser.add_argument("--cold", action="store_true", help="an empty env cache for each mode (builds counted)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from casekit.archive import Archive

    cases = args.cases.split(",") if args.cases else Archive(Path(args.archive)).ids()[: args.k]
    releases = len(args.versions.split(",")) if args.versions and "," in args.versions else "index"
    print(f"bisect bench: {len(cases)} case(s) x {releases} release(s), {'cold' if args.cold else 'warm'} env cache")
    work = Path(tempfile.mkdtemp(prefix="casekit-bisect-bench-"))
    results = []
    try:
        for mode in (per_case, shared):
            cache = work / f"cache-{mode.__name__}" if args.cold else None
            results.append(mode(args, cases, cache, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"  {'mode':10} {'seconds':>9} {'env builds':>11} {'build s':>9} {'reused':>7}")
    for result in results:
        if result.skipped:
            print(f"  {result.mode:10} {result.skipped}")
            continue
        print(
            f"  {result.mode:10} {result.seconds:9.1f} {result.env_builds:11d} {result.build_seconds:9.1f} {result.reused_envs:7d}"
        )
    one, together = results
    same = None
    if not together.skipped:
        same = one.answers == together.answers
        print(f"  shared / per-case: {together.seconds / one.seconds:.2f}x (goal <= 0.5x); same answers: {same}")
    print("  answers (first bad release): " + ", ".join(f"{c}={a}" for c, a in one.answers.items()))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0 if same in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main())
