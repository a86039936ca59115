"""A managed venv's torch import, with and without bytecode, side by side in one run (`make bench`).

Three envs of the same torch 2.13.0 (from the local wheel in /opt/wheels), in one
fresh cache folder on the real cache's disk (so uv hardlinks them as it does for users):

- naive: what casekit built before, `uv pip install` with no `--compile-bytecode`
  (no `.pyc` under torch; inside the sandbox's read-only view Python can never
  write one, so every target start compiles torch again);
- managed: the env casekit's venv runner builds now (`VenvRunner.prepare`: bytecode
  compiled before the env is published);
- reference: the naive env after `python -m compileall` of its site-packages (the
  same torch with bytecode, as a docker image's build leaves it).

Each env imports `torch, torch._dynamo` in a fresh `python -B` (writes no bytecode:
what the read-only sandbox allows), in rotating order, --repeats times; the
medians and the ratios naive/managed and managed/reference are printed
(the issue's bar: managed within 1.2x of reference). --json FILE keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from casekit.runners.interface import TargetSpec
from casekit.runners.venv import VenvRunner
from casekit.runners.venv.cache import bytecode_counts, site_folders
from casekit.settings import cache_root

WHEELS = Path("/opt/wheels")
IMPORT = "import torch, torch._dynamo"


def naive_env(folder: Path, cache: Path) -> Path:
    """torch 2.13.0 installed as casekit did before: no bytecode."""
    env = {**os.environ, "UV_CACHE_DIR": str(cache / "uv")}
    subprocess.run(["uv", "venv", "-q", "-p", sys.executable, str(folder)], check=True, env=env)
    python = folder / "bin" / "python"
    command = ["uv", "pip", "install", "-q", "--python", str(python), "--only-binary", ":all:"]
    command += ["--find-links", str(WHEELS), "torch==2.13.0", "numpy"]
    subprocess.run(command, check=True, env=env)
    return folder


def time_import(env: Path) -> float:
    started = time.monotonic()
    subprocess.run([str(env / "bin" / "python"), "-B", "-c", IMPORT], check=True, capture_output=True)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not any(WHEELS.glob("torch-2.13.0*.whl")) or shutil.which("uv") is None:
        print("bytecode bench skipped: it needs uv and the torch 2.13.0 wheel in /opt/wheels")
        return 0
    real = cache_root()
    real.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-bytecode-", dir=real.parent))
    try:
        os.environ["UV_CACHE_DIR"] = str(work / "uv")
        started = time.monotonic()
        runner = VenvRunner(TargetSpec("venv", torch="2.13.0", find_links=str(WHEELS)), cache_dir=work)
        runner.prepare(lambda _line: None)
        assert runner.env is not None
        envs = {"managed": runner.env.path}
        built = {"managed": round(time.monotonic() - started, 1)}
        started = time.monotonic()
        envs["naive"] = naive_env(work / "naive", work)
        built["naive"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        envs["reference"] = naive_env(work / "reference", work)
        for site in site_folders(envs["reference"]):
            python = str(envs["reference"] / "bin" / "python")
            subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(site)], check=False)
        built["reference"] = round(time.monotonic() - started, 1)
        counts = {name: bytecode_counts(path) for name, path in envs.items()}
        print(f"torch modules with bytecode (py, pyc): {counts}", flush=True)
        print(f"env builds (s): {built}", flush=True)
        order = ["naive", "managed", "reference"]
        times: dict[str, list[float]] = {name: [] for name in order}
        for repeat in range(args.repeats):
            for name in order[repeat % 3 :] + order[: repeat % 3]:  # rotate, so no side always goes first
                times[name].append(time_import(envs[name]))
                print(f"  {name:<9} import {times[name][-1]:.2f} s", flush=True)
        medians = {name: round(statistics.median(values), 2) for name, values in times.items()}
        ratios = {
            "naive/managed": round(medians["naive"] / medians["managed"], 2),
            "managed/reference": round(medians["managed"] / medians["reference"], 2),
        }
        print(f"`{IMPORT}` medians (s): {medians}")
        print(f"ratios: {ratios} (bar: managed/reference <= 1.2)")
        if args.json:
            document = {
                "medians_s": medians,
                "ratios": ratios,
                "samples_s": times,
                "bytecode": counts,
                "build_s": built,
            }
            args.json.write_text(json.dumps(document, indent=1) + "\n")
        return 0 if ratios["managed/reference"] <= 1.2 else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
