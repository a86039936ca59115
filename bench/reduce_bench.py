"""casekit reduce on large repros, beside the naive way (`make bench`).

Each repro under bench/reduce/ is a realistic model or script (150-260 lines; one
of them spread over six files, reduced with --include) that shows a graph break.
For each, this run measures:

- the reduction itself (`casekit.reduce.run.reduce_script`, the current
  interpreter, --jobs as given): lines before -> after, candidates run,
  candidates per second, wall time, and whether the result was confirmed in a
  fresh probe;
- the naive way's cost per candidate, measured side by side: the original run
  once by a fresh probe process (one torch import per candidate, as a reducer
  that starts `python script.py` per candidate pays), against the reduction's
  own seconds per candidate; the ratio is printed;
- the reduced script run by plain `python` with TORCH_LOGS=graph_breaks: whether
  torch's own log shows the kept break's graph-break id;
- the checklist every result must pass (`casekit.reduce.checklist`): no unused
  parameter, no stand-in of the wrong kind, the compile call as the original
  wrote it, the kept lines' comments and the kept definitions' docstrings, formatted;
- with --second-python PATH (e.g. a torch 2.5.1 venv): whether the reduced
  files still pair with the original on that release (`check_on_release`:
  both run there, the kept break found in the original by casekit's pairing,
  the result judged by the reduction's oracle).

--budget caps each reduction, its confirming run included (default 300 s, the
issue's bound; the best so far is kept). --only NAME runs one repro. --json FILE
keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from casekit.reduce.checklist import checklist
from casekit.reduce.judge.choice import BreakChoice
from casekit.reduce.run import ReduceRequest, check_on_release, reduce_script
from casekit.reduce.source.lines import count_code_lines
from casekit.runners.interface import ProbeJob
from casekit.runners.python import PythonRunner
from casekit.runners.registry import interpreter_target

HERE = Path(__file__).resolve().parent / "reduce"


@dataclass(frozen=True)
class Repro:
    name: str
    script: Path
    includes: tuple[Path, ...] = ()
    what: str = ""


REPROS = (
    Repro("moe_lm", HERE / "moe_lm" / "moe_lm.py", what="MoE LM: expert dispatch (bincount, tolist)"),
    Repro("attention_branch", HERE / "attention_branch" / "attention_branch.py", what="ViT: if on a tensor"),
    Repro("train_step", HERE / "train_step" / "train_step.py", what="compiled train step: loss.item()"),
    Repro(
        "multifile",
        HERE / "multifile" / "transcribe.py",
        (HERE / "multifile" / "speech",),
        what="6 files (--include): lengths.tolist() in a layer",
    ),
    Repro("bigbird_eval", HERE / "bigbird_eval" / "bigbird_eval.py", what="transformers BigBird: logger.warning"),
    Repro(
        "decoder_lm",
        HERE / "decoder_lm" / "decoder_lm.py",
        what="decoder-only LM, comments, the break three calls deep: nonzero()",
    ),
    Repro(
        "train_loader",
        HERE / "train_loader" / "train_loader.py",
        what="training script: DataLoader, metrics logger, float(tensor) in forward",
    ),
)


def code_lines(path: Path) -> int:
    """Lines of code as the reduction counts them: no blank line, comment or docstring."""
    return count_code_lines(path.read_text(encoding="utf-8"))


def naive_seconds(repro: Repro, timeout: float) -> float:
    """One candidate the naive way: a fresh interpreter (torch imported again) observing the script."""
    from casekit.includes import collect_includes

    runner = PythonRunner(interpreter_target())
    runner.prepare(lambda message: None)
    includes = tuple(collect_includes(repro.script, list(repro.includes))) if repro.includes else ()
    job = ProbeJob(id="naive", script=repro.script, timeout=timeout, includes=includes)
    started = time.monotonic()
    runner.run_probe([job], lambda message: None)
    return time.monotonic() - started


def standalone(repro: Repro, out: Path, gb_id: str | None, timeout: float = 300.0) -> str:
    """The reduced script run by plain `python` with TORCH_LOGS=graph_breaks (no casekit): whether torch's own
    log shows a graph break with the kept break's id."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(out / repro.script.name)],
        env={**os.environ, "TORCH_LOGS": "graph_breaks"},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=out,
    )
    if done.returncode != 0:
        return f"no: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    if "Graph break" not in done.stderr:
        return "no: torch's log shows no graph break"
    if gb_id and gb_id.lower() not in done.stderr.lower():
        return f"no: the log's break is not {gb_id}"
    return f"same break ({gb_id})" if gb_id else "a graph break"


def bench_one(repro: Repro, args: argparse.Namespace, out_root: Path) -> dict[str, object]:
    runner = PythonRunner(interpreter_target())
    out = out_root / repro.name
    request = ReduceRequest(
        script=repro.script,
        out=out,
        includes=list(repro.includes),
        choice=BreakChoice(),
        jobs=args.jobs,
        max_seconds=args.budget,
    )
    started = time.monotonic()

    def said(message: str) -> None:  # each phase with its time: where a reduction's time goes
        if args.phases:
            print(f"  {time.monotonic() - started:6.1f} s  {message}", flush=True)

    result = reduce_script(request, runner, said)
    files = sorted(out.rglob("*.py"))
    lines_before = result.lines_before
    lines_after = sum(code_lines(path) for path in files)
    row: dict[str, object] = {
        "repro": repro.name,
        "what": repro.what,
        "files_before": result.files_before,
        "files_after": len(files),
        "lines_before": lines_before,
        "lines_after": lines_after,
        "cut_percent": round(100.0 * (lines_before - lines_after) / max(lines_before, 1), 1),
        "candidates": result.candidates,
        "candidates_per_s": round(result.per_second, 3),
        "wall_s": round(result.seconds, 1),
        "load": os.getloadavg(),
        "stopped": result.stopped,
        "refusals": dict(sorted(result.refusals.items(), key=lambda kv: -kv[1])),  # why candidates were refused
        "kept": f"{result.kept.where()} {result.kept.gb_id or result.kept.category}",
        "confirmed": bool(result.confirmed and result.confirmed.kept),
        "out": str(out),
    }
    row["standalone"] = standalone(repro, out, result.kept.gb_id)
    if result.best is not None and result.original_files is not None:
        originals = {n: r.text for n, r in result.original_files.files.items() if r is not None}
        row["checklist"] = checklist(result.best, originals) if result.improved else ["not reduced"]
    naive = naive_seconds(repro, result.timeout)
    own = result.seconds / max(result.candidates, 1)
    row["naive_s_per_candidate"] = round(naive, 2)
    row["reduce_s_per_candidate"] = round(own, 2)
    row["naive_over_reduce"] = round(naive / own, 2) if own else None
    if args.second_python:
        other = PythonRunner(interpreter_target(args.second_python))
        try:
            judgement = check_on_release(result, other, lambda message: None)
            row["second_release"] = "pairs" if judgement.kept else f"no: {judgement.why[:120]}"
        except Exception as error:  # a repro that needs a library the second venv lacks
            row["second_release"] = f"not run: {str(error)[:120]}"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--budget", type=float, default=300.0, help="seconds per reduction, confirming run included (best so far kept)"
    )
    parser.add_argument("--jobs", type=int, default=None, help="candidates at once [default: the cores]")
    parser.add_argument("--second-python", help="an interpreter with another torch release (pairing check)")
    parser.add_argument("--only", action="append", help="run only this repro (repeatable)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--keep", type=Path, help="write the reduced files under this folder")
    parser.add_argument("--phases", action="store_true", help="print each phase of a reduction with its start time")
    args = parser.parse_args()
    chosen = [r for r in REPROS if not args.only or r.name in args.only]
    out_root = args.keep or Path(tempfile.mkdtemp(prefix="reduce-bench-"))
    print(f"casekit reduce bench: {len(chosen)} repros, budget {args.budget:g} s each, load {os.getloadavg()}")
    rows = []
    for repro in chosen:
        row = bench_one(repro, args, out_root)
        rows.append(row)
        print(
            f"{row['repro']:<17} {row['lines_before']:>4} -> {row['lines_after']:>3} lines (-{row['cut_percent']}%), "
            f"files {row['files_before']} -> {row['files_after']}, {row['candidates']} candidates, "
            f"{row['candidates_per_s']}/s, {row['wall_s']} s{' (' + str(row['stopped']) + ')' if row['stopped'] else ''}; "
            f"kept {row['kept']}, confirmed {row['confirmed']}; naive {row['naive_s_per_candidate']} s/candidate vs "
            f"{row['reduce_s_per_candidate']} ({row['naive_over_reduce']}x)"
            + f"; python {repro.script.name} alone: {row['standalone']}"
            + (f"; second release: {row['second_release']}" if "second_release" in row else "")
            + f"; checklist: {'; '.join(row.get('checklist') or []) or 'passes'}"
            + f"; refused: {row['refusals']}",
            flush=True,
        )
    print(f"reduced files under {out_root}; load after {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
