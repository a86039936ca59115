"""The `replay` command: parse the flags into a ReplayRequest, call `run_replay`, render the outcome."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from casekit.cli.common import (
    Allow,
    ArchiveOption,
    FailOnOption,
    PerfRepeats,
    PerfScripts,
    PerfThreshold,
    default_runner_factory,
    emit_json,
    examples,
    human_to_stderr,
    notice,
    open_archive,
    progress_view,
)
from casekit.fsutil import STDOUT
from casekit.outcome import FailOn

if TYPE_CHECKING:  # the replay core (runners, classification) is imported only when the command runs
    from casekit.replay.plan import ReplayOutcome

REPLAY_EXAMPLES = examples(
    "casekit replay                                  (the local torch; the archive is not changed)",
    "casekit replay --torch 2.5.1 --torch 2.13 --json out/replay.json --fail-on warn",
    "casekit replay --torch 2.13 --torch nightly     (the stable lane and the nightly lane, side by side)",
    "casekit report --results out/replay.json        (render what that replay found)",
    "casekit replay --record --commit                (append history to each bundle, commit it)",
    "casekit replay --json - | jq .results           (the JSON on stdout, the table on stderr)",
    "casekit replay --runner docker --torch 2.13.0 --base-image casekit-base:bookworm --find-links /opt/wheels",
    "casekit replay --python ~/envs/nightly/bin/python --case item-branch",
    "casekit replay --torch 2.13 --shard-from-env --results-dir results/   (an array task: casekit plan --emit ...)",
    "casekit replay --torch 2.13 --vary-dynamo nested_graph_breaks=True   (preview a flip: each target with it and without)",
    "casekit replay --torch 2.13.0 --vary-package transformers==4.57.1     (torch fixed, the library varied)",
)


# The replay flags, declared once here so the command reads as what it does.
Torches = Annotated[
    list[str] | None,
    typer.Option(
        "--torch",
        help="A torch version for a managed target (repeatable): '2.13' = newest 2.13.x; 'nightly', "
        "'nightly:YYYY-MM-DD', 'test:2.14' (a release candidate), 'pypi:2.13' (PyPI's own build).",
    ),
]
Pythons = Annotated[
    list[str] | None, typer.Option("--python", help="An existing interpreter as a target (repeatable).")
]
RunnerName = Annotated[
    str | None, typer.Option("--runner", help="How --torch targets are provided: venv (default) or docker.")
]
Cuda = Annotated[
    str | None,
    typer.Option(
        "--cuda", help="Build variant for --torch targets: cpu or a CUDA tag (cu126...) [default: cpu without a GPU]."
    ),
]
IndexUrl = Annotated[str | None, typer.Option("--index-url", help="Package index for torch.")]
FindLinks = Annotated[str | None, typer.Option("--find-links", help="A folder of wheels to install from.")]
Image = Annotated[str | None, typer.Option("--image", help="Docker: use this image as is.")]
CaseIds = Annotated[list[str] | None, typer.Option("--case", help="Replay only these case ids (repeatable).")]
Backend = Annotated[str | None, typer.Option("--backend", help="Override each case's recorded backend.")]
Timeout = Annotated[
    float | None,
    typer.Option("--timeout", help="Seconds each run may take [default: per case, derived from its capture]."),
]
JsonOut = Annotated[
    Path | None,
    typer.Option(
        "--json",
        metavar="FILE",
        help="Write the casekit.replay/1 JSON here, whatever the exit code; '-' prints it to stdout.",
    ),
]
Record = Annotated[
    bool,
    typer.Option(
        "--record/--no-record",
        help="Append this replay to each bundle's history (changes the bundles; off by default so a run "
        "leaves the git tree clean; --commit implies it).",
    ),
]
PinPackages = Annotated[
    bool,
    typer.Option(
        "--pin-packages/--no-pin-packages",
        help="Install the library versions the cases recorded beside torch (managed targets).",
    ),
]
Shard = Annotated[
    str | None, typer.Option("--shard", metavar="K/N", help="K/N: run a stable slice of the case x target matrix.")
]
ShardFromEnv = Annotated[
    bool,
    typer.Option(
        "--shard-from-env",
        help="Read K/N from the scheduler's variables: SLURM_ARRAY_TASK_ID (+ _COUNT or _MIN/_MAX), "
        "JOB_COMPLETION_INDEX (+ CASEKIT_SHARD_COUNT), CASEKIT_SHARD_INDEX/_COUNT (GitHub matrix), "
        "BUILDKITE_PARALLEL_JOB/_COUNT, CI_NODE_INDEX/_TOTAL; says which it used.",
    ),
]
ResultsDir = Annotated[
    Path | None,
    typer.Option(
        "--results-dir",
        metavar="DIR",
        help="Write one casekit.replay/1 file per target to DIR/<target>/shard-K-of-N.json, atomically "
        "(a retried shard replaces its own files); `casekit merge DIR` reads them back.",
    ),
]
BaseImage = Annotated[
    str | None,
    typer.Option(
        "--base-image",
        help="Docker: base image for the replay image (casekit-base:bookworm on hosts without a registry).",
    ),
]
AllowInvalid = Annotated[
    bool,
    typer.Option("--allow-invalid", help="Invalid bundles are reported but do not make the exit code 2 by themselves."),
]
Commit = Annotated[
    bool,
    typer.Option(
        "--commit", help="Record the history and commit the updated bundles with a message saying what changed."
    ),
]


Dynamo = Annotated[
    list[str] | None,
    typer.Option(
        "--dynamo",
        metavar="NAME=VALUE",
        help="Set a torch._dynamo.config setting (or stance=NAME) in every run of every target (repeatable), "
        "e.g. nested_graph_breaks=True; a target whose release lacks the name fails with one line naming it.",
    ),
]
VaryDynamo = Annotated[
    list[str] | None,
    typer.Option(
        "--vary-dynamo",
        metavar="NAME=VALUE",
        help="Run each target once more with this setting (repeatable: one more target per setting); the "
        "report says, per changed break, whether the setting changed it.",
    ),
]
Packages = Annotated[
    list[str] | None,
    typer.Option(
        "--package",
        metavar="NAME==VERSION",
        help="Managed targets: install this library version in place of the one the cases recorded (repeatable).",
    ),
]
VaryPackages = Annotated[
    list[str] | None,
    typer.Option(
        "--vary-package",
        metavar="NAME==VERSION",
        help="Managed targets: run each target once more with this library version, torch fixed (repeatable); "
        "the report says, per changed break, whether torch or the library changed it.",
    ),
]


Perf = Annotated[
    bool,
    typer.Option(
        "--perf",
        help="Also time each case's script on every target, side by side, after the replay: compile cold and "
        "warm, steady state, speed-up over eager, each judged slower / same / faster / inconclusive against the "
        "first target (fresh processes one at a time, nothing else running: --jobs applies to the replay only).",
    ),
]
PerfBaseline = Annotated[
    str | None,
    typer.Option(
        "--perf-baseline", metavar="LABEL", help="The target --perf judges the others against [default: the first]."
    ),
]


Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        help="Scripts run at once inside each target (one torch import) [default: its cores / targets at once].",
    ),
]
SerialTimings = Annotated[
    bool,
    typer.Option(
        "--serial-timings",
        help="Run scripts one at a time, so compile and steady-state times are not measured under parallel load.",
    ),
]


def replay(
    torch: Torches = None,
    python: Pythons = None,
    runner: RunnerName = None,
    cuda: Cuda = None,
    index_url: IndexUrl = None,
    find_links: FindLinks = None,
    image: Image = None,
    case: CaseIds = None,
    archive: ArchiveOption = None,
    backend: Backend = None,
    timeout: Timeout = None,
    json_out: JsonOut = None,
    fail_on: FailOnOption = "error",
    record: Record = False,
    pin_packages: PinPackages = True,
    shard: Shard = None,
    shard_from_env: ShardFromEnv = False,
    results_dir: ResultsDir = None,
    base_image: BaseImage = None,
    allow: Allow = None,
    allow_invalid: AllowInvalid = False,
    commit: Commit = False,
    jobs: Jobs = None,
    serial_timings: SerialTimings = False,
    dynamo: Dynamo = None,
    vary_dynamo: VaryDynamo = None,
    package: Packages = None,
    vary_package: VaryPackages = None,
    perf: Perf = False,
    perf_repeats: PerfRepeats = None,
    perf_threshold: PerfThreshold = None,
    perf_scripts: PerfScripts = None,
    perf_baseline: PerfBaseline = None,
) -> None:
    """Replay the archive on one or more targets and classify every break."""
    import os

    from casekit.perf.settings import settings_from_flags
    from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay
    from casekit.replay.run import ReplayOptions

    asked = perf or any(flag is not None for flag in (perf_repeats, perf_threshold, perf_scripts, perf_baseline))

    request = ReplayRequest(
        targets=TargetChoice(
            pythons=tuple(python or ()),
            torches=tuple(torch or ()),
            runner=runner,
            cuda=cuda,
            index_url=index_url,
            find_links=find_links,
            image=image,
            allow=tuple(allow or ()),
            base_image=base_image,
            dynamo=tuple(dynamo or ()),
            packages=tuple(package or ()),
            vary_dynamo=tuple(vary_dynamo or ()),
            vary_packages=tuple(vary_package or ()),
        ),
        case_ids=tuple(case or ()),
        options=ReplayOptions(
            backend=backend,
            timeout=timeout,
            record=record or commit,
            pin_packages=pin_packages,
            jobs=jobs,
            serial_timings=serial_timings,
            perf=settings_from_flags(perf_repeats, perf_threshold, perf_scripts, backend) if asked else None,
            perf_baseline=perf_baseline,
        ),
        fail_on=FailOn.parse(fail_on),
        shard=shard,
        json_out=json_out,
        allow_invalid=allow_invalid,
        commit=commit,
        shard_env=dict(os.environ) if shard_from_env else None,
        results_dir=results_dir,
    )
    with progress_view() as progress:
        outcome = run_replay(request, open_archive(archive), default_runner_factory, progress, notice)
    if json_out == STDOUT:
        emit_json(outcome.document.to_json(), STDOUT)
    typer.echo(render(outcome), err=human_to_stderr(json_out))
    if outcome.failed_targets:  # the why is in the report above, once; this line is for the exit code
        labels = ", ".join(line.split(": ", 1)[0] for line in outcome.failed_targets)
        typer.echo(f"casekit: error: {len(outcome.failed_targets)} target(s) could not run: {labels}", err=True)
    if outcome.invalid:
        typer.echo(f"casekit: error: {len(outcome.invalid)} invalid bundle(s) were not replayed", err=True)
    if outcome.write_failures:  # the results above stand; what could not be written is as it was
        typer.echo(f"casekit: error: {'; '.join(outcome.write_failures)}", err=True)
    raise typer.Exit(outcome.exit_code)


def render(outcome: ReplayOutcome) -> str:
    """The terminal view of a replay (casekit.report.text.replay_text), plus what was written."""
    from casekit.progress import Verbosity, verbosity
    from casekit.report.text import replay_document_text

    lines = []
    if outcome.report is None:
        lines.append(f"shard {outcome.document.shard}: nothing to run")
    else:
        lines.append(
            replay_document_text(outcome.document, verbose=verbosity() is Verbosity.VERBOSE, marks=outcome.marks)
        )
    if outcome.committed:
        lines.append(outcome.committed)
    elif outcome.recorded:
        lines.append(f"recorded this replay in {outcome.recorded} bundle(s) (not committed)")
    if outcome.json_written:
        targets = outcome.document.targets
        nothing_ran = bool(targets) and all(target.error for target in targets)
        said = ": no case ran (it records each target's error, no verdict)" if nothing_ran else ""
        lines.append(f"\nwrote {outcome.json_written}{said}")
    for path in outcome.results_written:
        lines.append(f"wrote {path}")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    """Add replay to the casekit app."""
    app.command(epilog=REPLAY_EXAMPLES)(replay)
