"""`casekit plan` at scale: 10,000 synthetic cases x 8 targets must fit 256 jobs, balanced by recorded cost.

Writes a synthetic archive from the starter bundles (bench/scale_bench.py's variants:
distinct ids, sources and histories), with each case's recorded run times scaled by
a heavy-tailed factor (log-normal, sigma 1, seeded by the case number) so the cases
cost from a few hundredths of a second to over a minute, as a real archive does.
Then runs, as a user would, `casekit plan --json` over 8 managed targets (no
environment is built: planning reads the archive index only), and prints the shard
count, the max / mean shard cost and the time the plan took (cold: no index; warm).

    python bench/plan_bench.py                  # 10,000 cases, 8 targets, --max-jobs 256
    python bench/plan_bench.py --cases 1000 --shards 64
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale_bench import variant  # noqa: E402

from casekit.archive.store import Archive  # noqa: E402
from casekit.bundle import case_to_toml  # noqa: E402
from casekit.model import Case  # noqa: E402

TORCHES = ["2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0"]


def skewed(template: Case, number: int) -> Case:
    """scale_bench's variant, its recorded run times scaled by a log-normal factor of its own."""
    case = variant(template, number)
    factor = random.Random(number).lognormvariate(0.0, 1.0)
    assert case.capture is not None
    run_seconds = {key: round(value * factor, 3) for key, value in case.capture.run_seconds.items()}
    return dataclasses.replace(case, capture=dataclasses.replace(case.capture, run_seconds=run_seconds))


def _write_chunk(job: tuple[str, list[Case], range]) -> None:
    folder, templates, numbers = job
    for number in numbers:
        case = skewed(templates[number % len(templates)], number)
        Path(folder, f"{case.id}.toml").write_text(case_to_toml(case), encoding="utf-8")


def make_archive(folder: Path, size: int) -> float:
    started = time.perf_counter()
    templates = Archive(ROOT / "cases").load_all()
    folder.mkdir(parents=True)
    step = max(1, size // 64)
    jobs = [(str(folder), templates, range(start, min(size, start + step))) for start in range(0, size, step)]
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        pool.map(_write_chunk, jobs)
    return time.perf_counter() - started


def plan(archive: Path, extra: list[str], out: Path) -> float:
    argv = [sys.executable, "-m", "casekit", "plan", "--archive", str(archive), "--json", str(out)]
    for torch in TORCHES:
        argv += ["--torch", torch]
    started = time.perf_counter()
    done = subprocess.run(
        argv + extra, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"casekit plan failed ({done.returncode}):\n{done.stderr[-2000:]}")
    print(done.stdout.split("\n  shard")[0])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--max-jobs", type=int, default=256)
    parser.add_argument("--shards", type=int, default=None, help="pass --shards N (default: as many as --max-jobs)")
    parser.add_argument("--keep", type=Path, default=None, help="write the archive here and keep it")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="casekit-plan-bench-"))
    archive = args.keep or work / "cases"
    try:
        if not archive.exists():
            print(f"writing {args.cases} synthetic bundles ... {make_archive(archive, args.cases):.1f} s")
        shards = args.shards or args.max_jobs
        extra = ["--max-jobs", str(args.max_jobs), "--shards", str(shards)]
        shutil.rmtree(archive / ".casekit", ignore_errors=True)
        cold = plan(archive, extra, work / "plan.json")
        warm = plan(archive, extra, work / "plan.json")
        data = json.loads((work / "plan.json").read_text(encoding="utf-8"))
        plan(archive, ["--max-jobs", str(args.max_jobs)], work / "default.json")
        chosen = json.loads((work / "default.json").read_text(encoding="utf-8"))
        figures = {
            "cases": data["cases"],
            "targets": len(data["targets"]),
            "shards": data["shards"],
            "max_jobs": data["max_jobs"],
            "fits": data["shards"] <= data["max_jobs"],
            "max_over_mean": data["balance"],
            "max_s": data["cost_s"]["max"],
            "mean_s": data["cost_s"]["mean"],
            "unrecorded": len(data["unrecorded"]),
            "plan_cold_s": round(cold, 2),
            "plan_warm_s": round(warm, 2),
            "default_shards": chosen["shards"],
            "default_max_over_mean": chosen["balance"],
        }
        print(json.dumps(figures, indent=2))
        if not figures["fits"] or figures["max_over_mean"] > 1.2:
            raise SystemExit("FAIL: the plan does not fit the jobs, or max/mean shard cost is over 1.2")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
