"""Record raw probe results of the corpus repros on one interpreter (one batch, one torch import).

    PYTHONPATH=$PWD python3 tests/corpus/record.py /path/to/python [name ...]
writes tests/corpus/<name>/probe/<torch version>.json, the fixtures the fast
corpus test classifies (tests/test_corpus.py), and tests/corpus/<name>/bare/<torch version>.json,
Dynamo's own graph and recompile counts of the script run alone (bare.py). Same trimming as
tests/fixtures/record_probe_fixtures.py: small and machine-independent.

2.15.0 (PyPI's 2.15.0+cu132, about 3 GB with its CUDA wheels; it runs on a CPU host) was recorded from a
plain `uv venv` + `uv pip install torch==2.15.0 numpy`: uv reads no pip configuration, so a pip cap such as
/etc/xdg/pip/constraints.txt's torch<=2.14.1 does not apply to it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from casekit.runners.interface import ProbeJob, TargetSpec
from casekit.runners.registry import make_runner

HERE = Path(__file__).resolve().parent


def corpus_scripts(names: list[str] | None = None) -> list[Path]:
    scripts = sorted(HERE.glob("*/repro.py"))
    return [s for s in scripts if not names or s.parent.name in names]


def record(python: str, names: list[str] | None = None, out_root: Path = HERE, bare: bool = True) -> str:
    """Run the probe over the corpus with `python`; return the torch version recorded. bare=False: the probe's
    records only (the bare counts take one fresh interpreter, one torch import, per script)."""
    runner = make_runner(TargetSpec(runner="python", python=python))
    scripts = corpus_scripts(names)
    jobs = [
        ProbeJob(id=s.parent.name, script=s, modes=("eager", "compiled", "fullgraph"), timeout=180) for s in scripts
    ]
    batch = runner.run_probe(jobs, lambda m: print("  ...", m, file=sys.stderr))
    version = batch.environment["torch"].split("+")[0]
    for job in jobs:
        raw = batch.results.get(job.id)
        if raw is None:
            print(f"{job.id}: no result ({batch.failed.get(job.id)})", file=sys.stderr)
            continue
        for run in raw["runs"].values():
            if run.get("mode") == "fullgraph":
                run.pop("trace_events", None)
            run["stderr_tail"] = ""
        text = json.dumps(raw, indent=1, sort_keys=True).replace(tempfile.gettempdir(), "/TMP")
        out = out_root / job.id / "probe"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{version}.json").write_text(text)
    for script in scripts if bare else ():
        counts = bare_counts(python, script)
        (out_root / script.parent.name / "bare").mkdir(parents=True, exist_ok=True)
        (out_root / script.parent.name / "bare" / f"{version}.json").write_text(json.dumps(counts) + "\n")
    return version


def bare_counts(python: str, script: Path) -> dict[str, int]:
    """Dynamo's own graph and recompile counts of `script` run alone on `python` (bare.py, no casekit)."""
    done = subprocess.run(
        [python, "-I", str(HERE / "bare.py"), script.name],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    line = next((line for line in done.stdout.splitlines() if line.startswith("COUNTS ")), None)
    if line is None:
        raise RuntimeError(f"{script}: bare run gave no counts: {done.stderr[-2000:]}")
    return json.loads(line.removeprefix("COUNTS "))


if __name__ == "__main__":
    print(record(sys.argv[1] if len(sys.argv) > 1 else sys.executable, sys.argv[2:] or None))
