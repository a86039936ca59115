"""The `plan` command: parse the flags, call `plan_archive`, print the plan, emit a job file."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from casekit.cli.common import STDOUT, ArchiveOption, emit_json, examples, notice, open_archive, report_invalid
from casekit.cli.replay import (
    Allow,
    BaseImage,
    CaseIds,
    Cuda,
    Dynamo,
    FindLinks,
    Image,
    IndexUrl,
    Packages,
    Pythons,
    RunnerName,
    Torches,
    VaryDynamo,
    VaryPackages,
)
from casekit.errors import CasekitError

PLAN_EXAMPLES = examples(
    "casekit plan --torch 2.12.1 --torch 2.13.0 --max-jobs 256          (the plan: shards, costs, balance)",
    "casekit plan --torch 2.13.0 --runner docker --emit slurm --out replay.sbatch && bash replay.sbatch",
    "casekit plan --torch 2.12.1 --torch 2.13.0 --emit k8s --registry registry.example/team/ --out replay.yaml",
    "casekit plan --torch 2.13.0 --shards 12 --emit gha --out .github/workflows/casekit.yml",
    "casekit plan --python ~/envs/a/bin/python --shards 6 --json plan.json",
)


def _casekit_command(given: str | None) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The command jobs run casekit with: --casekit as given; else this interpreter with this casekit
    (`python -m casekit`, and PYTHONPATH when casekit runs from a checkout rather than an install)."""
    import shlex

    if given:
        return tuple(shlex.split(given)), ()
    import casekit

    package_root = Path(casekit.__file__).resolve().parent.parent
    environment: tuple[tuple[str, str], ...] = ()
    if (package_root / "pyproject.toml").is_file():  # a checkout: the jobs import this very one
        environment = (("PYTHONPATH", str(package_root)),)
    return (sys.executable, "-m", "casekit"), environment


def _job_archive(given: Path | None, root: Path, engine: str) -> str:
    """The archive as the jobs name it: Slurm jobs share this file system, so an absolute path (a task
    runs wherever the script was submitted from); k8s mounts a subPath of its claim and GitHub a
    checkout, so there only a relative name makes sense."""
    if engine == "slurm":
        return os.path.abspath(given or root)
    if given is not None and not given.is_absolute():
        return str(given)
    return (given or root).name


def _job_results(given: str, engine: str) -> str:
    """--results-dir as the jobs name it: absolute for Slurm (see `_job_archive`), as given elsewhere."""
    return os.path.abspath(given) if engine == "slurm" else given


def _job_path(given: str | None, engine: str, *, folder: bool = False) -> str | None:
    """A local path among the replay options (an interpreter; a wheel `folder`) as Slurm tasks need it:
    absolute, since a task runs in whatever folder the script was submitted from. An interpreter's
    name (`python3`, found on PATH) and a URL stay as they are."""
    if engine != "slurm" or not given or "://" in given or (not folder and os.sep not in given):
        return given
    return os.path.abspath(given)


def plan(
    torch: Torches = None,
    python: Pythons = None,
    runner: RunnerName = None,
    cuda: Cuda = None,
    index_url: IndexUrl = None,
    find_links: FindLinks = None,
    image: Image = None,
    case: CaseIds = None,
    archive: ArchiveOption = None,
    base_image: BaseImage = None,
    allow: Allow = None,
    dynamo: Dynamo = None,
    vary_dynamo: VaryDynamo = None,
    package: Packages = None,
    vary_package: VaryPackages = None,
    shards: Annotated[
        int | None, typer.Option("--shards", min=1, help="Cut into this many shards [default: from the costs].")
    ] = None,
    max_jobs: Annotated[
        int, typer.Option("--max-jobs", min=1, help="The most jobs the engine takes (GitHub: 256 per matrix).")
    ] = 256,
    shard_seconds: Annotated[
        float,
        typer.Option("--shard-seconds", help="Without --shards: cut so each shard takes about this long."),
    ] = 3600.0,
    import_seconds: Annotated[
        float, typer.Option("--import-seconds", help="What a shard pays per target it imports torch for.")
    ] = 10.0,
    emit: Annotated[
        str | None, typer.Option("--emit", metavar="ENGINE", help="Write a job file: slurm, k8s or gha.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The job file [default: casekit-replay.sbatch / .k8s.yaml / .yml]; '-': stdout."),
    ] = None,
    results_dir: Annotated[
        str, typer.Option("--results-dir", help="Where the jobs write their results (a shared folder).")
    ] = "results",
    casekit_command: Annotated[
        str | None,
        typer.Option(
            "--casekit",
            metavar="COMMAND",
            help="How jobs run casekit [default: slurm: this interpreter and this casekit; k8s, gha: casekit].",
        ),
    ] = None,
    job_name: Annotated[str, typer.Option("--job-name", help="The jobs' name.")] = "casekit-replay",
    fail_on: Annotated[str, typer.Option("--fail-on", metavar="LEVEL", help="The merge step's --fail-on.")] = "error",
    sbatch: Annotated[
        list[str] | None,
        typer.Option("--sbatch", metavar="OPTION", help="Slurm: an #SBATCH option, e.g. --gres=gpu:1 (repeatable)."),
    ] = None,
    registry: Annotated[str, typer.Option("--registry", help="k8s: prefix of the replay images' names.")] = "",
    claim: Annotated[
        str, typer.Option("--claim", help="k8s: the PersistentVolumeClaim with the archive and the results.")
    ] = "casekit",
    json_out: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="Write the casekit.plan/1 JSON; '-': stdout.")
    ] = None,
) -> None:
    """Plan shards of the case x target matrix from the recorded run times; emit a Slurm, k8s or GitHub job."""
    from casekit.outcome import FailOn
    from casekit.replay.plan import TargetChoice
    from casekit.schedule.emit import JobSetup, get_emitter
    from casekit.schedule.plan import PlanRequest, plan_archive, plan_document, plan_text

    FailOn.parse(fail_on)
    emitter = get_emitter(emit) if emit else None
    engine = emitter.name if emitter else ""
    choice = TargetChoice(
        pythons=tuple(_job_path(given, engine) or given for given in python or ()),
        torches=tuple(torch or ()),
        runner=runner,
        cuda=cuda,
        index_url=index_url,
        find_links=_job_path(find_links, engine, folder=True),
        image=image,
        allow=tuple(allow or ()),
        base_image=base_image,
        dynamo=tuple(dynamo or ()),
        packages=tuple(package or ()),
        vary_dynamo=tuple(vary_dynamo or ()),
        vary_packages=tuple(vary_package or ()),
    )
    request = PlanRequest(
        targets=choice,
        case_ids=tuple(case or ()),
        shards=shards,
        max_jobs=max_jobs,
        shard_seconds=shard_seconds,
        import_s=import_seconds,
    )
    store = open_archive(archive)
    schedule = plan_archive(request, store)
    to_stderr = json_out == STDOUT or out == STDOUT
    typer.echo(plan_text(schedule), err=to_stderr)
    if json_out is not None:
        emit_json(plan_document(schedule), json_out)
    if emitter is not None:
        if casekit_command is None and emitter.name != "slurm":
            casekit_command = "casekit"  # installed in the runner or the image, not this machine's
        command, environment = _casekit_command(casekit_command)
        target = out or Path(emitter.default_file)
        setup = JobSetup(
            archive=_job_archive(archive, store.root, emitter.name),
            results=_job_results(results_dir, emitter.name),
            casekit=command,
            environment=environment,
            name=job_name,
            fail_on=fail_on,
            file=target.name if target != STDOUT else emitter.default_file,
            sbatch=tuple(sbatch or ()),
            registry=registry,
            claim=claim,
        )
        text = emitter.emit(schedule, choice, request.case_ids, setup)
        if target == STDOUT:
            sys.stdout.write(text)
        else:
            from casekit.fsutil import write_atomic

            try:
                write_atomic(target, text, executable=emitter.name == "slurm")
            except OSError as error:
                raise CasekitError(f"--out {target}: cannot write: {error.strerror or error}") from None
            notice(f"wrote {target} ({emitter.name}, {schedule.count} shard(s)); next:")
            # the file's header names it beside itself; here it is named as --out gave it, from this folder
            for step in emitter.steps(schedule, dataclasses.replace(setup, file=str(target))):
                notice(f"  {step}")
    if schedule.invalid:
        report_invalid(list(schedule.invalid))
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add plan to the casekit app."""
    app.command("plan", epilog=PLAN_EXAMPLES)(plan)
