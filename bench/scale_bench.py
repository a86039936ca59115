"""casekit on big archives: list, validate, report and shard planning, side by side in one run.

For each size (default 1,000 and 10,000) it writes a synthetic archive derived from
the starter bundles in cases/ (distinct ids, titles and script sources, a replay
history of two targets per case), then times, as a user runs them (a fresh
`python -m casekit` each, interpreter start included):

- naive: every bundle parsed (what casekit did before the archive index);
- cold: casekit with no index and no page cache (`.casekit/` removed first);
- warm: casekit again on the unchanged archive (the slower of two runs in a row).

The outputs of the naive and the indexed commands are compared (the report with
its time stamps masked). Prints the times and the ratios; --json FILE keeps them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from casekit.archive.store import Archive  # noqa: E402
from casekit.bundle import case_to_toml, sha256_text  # noqa: E402
from casekit.model import (  # noqa: E402
    Case,
    ReplayRecord,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
    Severity,
    SiteClass,
    SiteVerdict,
    Verdict,
)

TARGETS = [("venv-torch2.5.1", "2.5.1"), ("python-2.13.0", "2.13.0+cpu")]
VERDICTS = [(Verdict.UNCHANGED, Severity.INFO), (Verdict.IMPROVED, Severity.INFO), (Verdict.CHANGED, Severity.WARN)]
SHARD_LABELS = json.dumps([label for label, _ in TARGETS] + ["venv-torch2.7.1", "venv-torch2.9.0"])

NAIVE_LIST = """
import sys
from pathlib import Path
from casekit.archive.store import Archive
from casekit.report.text import table
rows = []
for case in Archive(Path(sys.argv[1])).load_all():
    pre = case.observations.get("pre")
    last = case.replays[-1] if case.replays else None
    rows.append([case.id, case.title, ",".join(case.tags), str(len(pre.sites)) if pre else "-",
                 f"{last.target} {last.verdict}" if last else "-"])
print(table(["id", "title", "tags", "breaks", "last replay"], rows))
"""
NAIVE_REPORT = """
import sys
from pathlib import Path
from casekit.archive.store import Archive
from casekit.report.formats import get_format
from casekit.report.output import write_files
from casekit.report.summary import summarize
summary = summarize(Archive(Path(sys.argv[1])).load_all())
write_files(get_format("html").render(summary), Path(sys.argv[2]))
"""
SHARD_PLAN = """
import json, sys
from pathlib import Path
from casekit.archive.store import Archive
from casekit.replay.shard import select_shard
store = Archive(Path(sys.argv[1]))
cases = store.load_all() if sys.argv[2] == "naive" else store.summaries()
ids = [c.id for c in cases if "draft" not in c.tags]
print(sorted(select_shard(ids, json.loads(sys.argv[3]), 2, 4))[:3])
"""


def variant(template: Case, number: int) -> Case:
    """A distinct, realistic case: the template's observations, its own id, title, sources and history."""

    def script(source: ScriptSource | None) -> ScriptSource | None:
        if source is None:
            return None
        text = source.source.rstrip("\n") + f"\n# synthetic variant {number}\n"
        return ScriptSource(source.name, sha256_text(text), text)

    recorded_pre = template.observations.get(ScriptRole.PRE)
    pre_sites = recorded_pre.sites if recorded_pre else []
    replays = []
    for index, (label, torch) in enumerate(TARGETS):
        verdict, severity = VERDICTS[(number + index) % len(VERDICTS)]
        site_class = SiteClass.GONE if verdict is Verdict.IMPROVED else SiteClass.PERSISTS
        replays.append(
            ReplayRecord(
                at=f"2026-11-{10 + index:02d}T12:00:{number % 60:02d}+00:00",
                target=label,
                torch=torch,
                runner=label.split("-")[0],
                verdict=verdict,
                severity=severity,
                statuses={role: ScriptStatus.OK for role in ScriptRole if template.script(role)},
                sites=[SiteVerdict(ScriptRole.PRE, site_class, site.where(), site.category) for site in pre_sites],
            )
        )
    pre = script(template.pre)
    assert pre is not None
    return dataclasses.replace(
        template,
        id=f"{template.id}-{number:05d}",
        title=f"{template.title} (variant {number})",
        pre=pre,
        post=script(template.post),
        replays=replays,
    )


def _write_chunk(job: tuple[str, list[Case], range]) -> None:
    folder, templates, numbers = job
    for number in numbers:
        case = variant(templates[number % len(templates)], number)
        Path(folder, f"{case.id}.toml").write_text(case_to_toml(case), encoding="utf-8")


def make_archive(folder: Path, size: int) -> float:
    """Write `size` synthetic bundles (in parallel); returns the seconds it took."""
    started = time.perf_counter()
    templates = Archive(ROOT / "cases").load_all()
    folder.mkdir(parents=True)
    step = max(1, size // 64)
    jobs = [(str(folder), templates, range(start, min(size, start + step))) for start in range(0, size, step)]
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        pool.map(_write_chunk, jobs)
    return time.perf_counter() - started


CPU: dict[str, float] = {}  # the CPU seconds (user + sys, workers included) of the last timed command


def timed(*argv: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def casekit(*args: str) -> tuple[float, str]:
    return timed("-m", "casekit", *args)


def forget_index(archive: Path) -> None:
    shutil.rmtree(archive / ".casekit", ignore_errors=True)


def masked(folder: Path) -> dict[str, str]:
    stamp = re.compile(r"generated by casekit on [^&<]*")
    return {
        str(path.relative_to(folder)): stamp.sub("generated by casekit on -", path.read_text(encoding="utf-8"))
        for path in sorted(folder.rglob("*.html"))
    }


def bench_size(work: Path, size: int, naive: bool) -> dict[str, object]:
    archive = work / f"archive-{size}"
    generated = make_archive(archive, size)
    print(
        f"\n{size} bundles ({sum(p.stat().st_size for p in archive.glob('*.toml')) / 1e6:.0f} MB, written in {generated:.1f} s)"
    )
    figures: dict[str, dict[str, float]] = {}
    outputs_agree = True

    def run_three(name: str, naive_argv: list[str] | None, casekit_argv: list[str], compare) -> None:  # type: ignore[no-untyped-def]
        nonlocal outputs_agree
        row: dict[str, float] = {}
        naive_out = None
        if naive and naive_argv is not None:
            row["naive"], naive_out = timed(*naive_argv)
            row["naive_cpu"] = CPU["last"]
        forget_index(archive)
        row["cold"], _ = timed(*casekit_argv)
        row["cold_cpu"] = CPU["last"]
        warm_runs = []
        for _ in range(2):
            warm_runs.append(timed(*casekit_argv))
            # the slower of two: a warm path that only pays off on its second run is caught
            if warm_runs[-1][0] == max(seconds for seconds, _ in warm_runs):
                row["warm"], row["warm_cpu"] = warm_runs[-1][0], CPU["last"]
        if naive_out is not None and not compare(naive_out, warm_runs[-1][1]):
            outputs_agree = False
            print(f"  !! {name}: the indexed output differs from the naive one")
        figures[name] = row

    run_three(
        "list",
        ["-c", NAIVE_LIST, str(archive)],
        ["-m", "casekit", "list", "--archive", str(archive)],
        lambda a, b: a == b,
    )
    naive_report, casekit_report = work / f"naive-report-{size}", work / f"report-{size}"
    run_three(
        "report (html)",
        ["-c", NAIVE_REPORT, str(archive), str(naive_report)],
        ["-m", "casekit", "report", "--archive", str(archive), "--format", "html", "--out", str(casekit_report)],
        lambda a, b: masked(naive_report) == masked(casekit_report),
    )
    run_three(
        "shard plan",
        ["-c", SHARD_PLAN, str(archive), "naive", SHARD_LABELS],
        ["-c", SHARD_PLAN, str(archive), "index", SHARD_LABELS],
        lambda a, b: a == b,
    )
    validate_s, _ = casekit("validate", "--archive", str(archive))
    figures["validate"] = {"naive": validate_s, "naive_cpu": CPU["last"]}
    print(f"  wall seconds (CPU seconds, user + sys, workers included); load average {os.getloadavg()[0]:.1f}")
    print(f"  {'':14} {'naive':>16} {'cold':>16} {'warm':>16} {'naive/warm':>11}")
    for name, row in figures.items():
        cells = [
            f"{row[k]:7.2f} ({row[k + '_cpu']:5.2f})" if k in row else f"{'-':>16}" for k in ("naive", "cold", "warm")
        ]
        ratio = f"{row['naive'] / row['warm']:10.1f}x" if "naive" in row and "warm" in row else f"{'-':>11}"
        print(f"  {name:14} {' '.join(cells)} {ratio}")
    print("  validate always parses every bundle (it is the check); naive = casekit there")
    print(f"  outputs agree (naive vs indexed): {outputs_agree if naive else 'not compared (--no-naive)'}")
    shutil.rmtree(archive, ignore_errors=True)
    shutil.rmtree(naive_report, ignore_errors=True)
    shutil.rmtree(casekit_report, ignore_errors=True)
    return {"size": size, "generate_s": round(generated, 2), "agree": outputs_agree, "seconds": figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated archive sizes")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive (parse everything) runs")
    parser.add_argument("--work", default=None, help="scratch folder [default: a temporary one]")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    print(f"scale bench on {len(os.sched_getaffinity(0))} core(s); times are wall seconds per command")
    work = Path(args.work or tempfile.mkdtemp(prefix="casekit-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = [bench_size(work, int(size), not args.no_naive) for size in args.sizes.split(",")]
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(result["agree"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
