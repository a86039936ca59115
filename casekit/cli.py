"""The casekit command line: parse, call one core function, render.

Every CasekitError becomes one line on stderr and exit code 2; nothing here
holds logic a test would have to go through the CLI to reach.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from casekit.archive import Archive, archive_dir
from casekit.errors import CasekitError
from casekit.model import Severity
from casekit.runners.interface import TargetSpec

app = typer.Typer(
    name="casekit",
    help=(
        "Reproducible case archive and bisection for torch.compile graph breaks.\n\n"
        "capture a triaged repro as a case; replay the archive on a new PyTorch to see,\n"
        "break by break, what is gone / moved / reappeared / persists / new; bisect to\n"
        "find the release or commit that changed a case."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ArchiveOption = Annotated[
    Path | None,
    typer.Option("--archive", help="Archive folder of case bundles [default: $CASEKIT_ARCHIVE or ./cases]"),
]


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"casekit: error: {message}", err=True)
    raise typer.Exit(code)


def progress(message: str) -> None:
    typer.echo(f"  ... {message}", err=True)


def open_archive(archive: Path | None) -> Archive:
    return Archive(archive_dir(archive))


def default_runner_factory(spec: TargetSpec):  # type: ignore[no-untyped-def]
    from casekit.runners.registry import make_runner

    return make_runner(spec)


CAPTURE_EXAMPLES = """Examples:

  casekit capture repro.py --fixed repro_fixed.py --title "item() branch in step" --tag data-dependent --rollback "drop fullgraph=True"

  casekit capture repro.py --python ~/envs/torch25/bin/python --id item-branch-251
"""

REPLAY_EXAMPLES = """Examples:

  casekit replay                                   (the local torch)

  casekit replay --torch 2.5.1 --torch 2.13 --json replay.json --fail-on warn

  casekit replay --runner docker --torch 2.13.0 --base-image casekit-base:bookworm --find-links /opt/wheels

  casekit replay --python ~/envs/nightly/bin/python --case item-branch --no-record
"""


@app.command(epilog=CAPTURE_EXAMPLES)
def capture(
    script: Annotated[Path, typer.Argument(help="The minimal repro (pre-fix) script.")],
    fixed: Annotated[Path | None, typer.Option("--fixed", help="The fixed (post-fix) script.")] = None,
    case_id: Annotated[
        str | None, typer.Option("--id", help="Case id (a slug) [default: from the title or file name]")
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="One-line title of the case.")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    notes: Annotated[str, typer.Option("--notes", help="What breaks and why (the triage reading).")] = "",
    fix_summary: Annotated[str, typer.Option("--fix-summary", help="What the fix changes.")] = "",
    rollback: Annotated[
        str, typer.Option("--rollback", help="How to return to fullgraph=False / eager if the fix stops holding.")
    ] = "",
    archive: ArchiveOption = None,
    python: Annotated[
        str | None, typer.Option("--python", help="Interpreter to run the probe with [default: this one].")
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            "--backend", help="torch.compile backend forced for the runs; 'eager' is fast and enough for graph breaks."
        ),
    ] = "eager",
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each run of a script may take.")] = 300.0,
    fullgraph: Annotated[
        bool,
        typer.Option(
            "--fullgraph/--no-fullgraph", help="Also run with fullgraph=True to record the first break as an error."
        ),
    ] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing case with the same id.")] = False,
    commit: Annotated[
        bool, typer.Option("--commit", help="Commit the new bundle to the archive's git repository.")
    ] = False,
) -> None:
    """Run a repro (and its fix) for real and file it as a case bundle."""
    from casekit.capture import CaptureRequest
    from casekit.capture import capture as do_capture
    from casekit.report.text import case_summary

    request = CaptureRequest(
        script=script,
        fixed=fixed,
        case_id=case_id,
        title=title,
        tags=tag or [],
        notes=notes,
        fix_summary=fix_summary,
        rollback_notes=rollback,
        backend=backend,
        timeout=timeout,
        fullgraph=fullgraph,
        force=force,
    )
    store = open_archive(archive)
    if commit:
        from casekit.gitarchive import require_repo

        require_repo(store.root)
    runner = default_runner_factory(TargetSpec(runner="python", python=python))
    case = do_capture(request, runner, store, progress)
    typer.echo(case_summary(case))
    typer.echo(f"\nsaved {store.path_for(case.id)}")
    if commit:
        from casekit.gitarchive import commit_paths

        typer.echo(commit_paths(store.root, [store.path_for(case.id)], f"capture {case.id}: {case.title}"))


@app.command("list")
def list_cases(archive: ArchiveOption = None) -> None:
    """List the cases in the archive."""
    from casekit.report.text import table

    store = open_archive(archive)
    cases = store.summaries(history=False)  # through the archive index: only changed bundles are parsed
    rows = []
    for case in cases:
        pre = case.break_counts.get("pre")
        last = case.last_replay
        rows.append(
            [
                case.id,
                case.title,
                ",".join(case.tags),
                "-" if pre is None else str(pre),
                " ".join(last) if last else "-",
            ]
        )
    typer.echo(table(["id", "title", "tags", "breaks", "last replay"], rows))


@app.command()
def show(
    case_id: Annotated[str, typer.Argument(help="Case id.")],
    archive: ArchiveOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole case as JSON.")] = False,
) -> None:
    """Show one case: sites, graphs, recompiles, inputs, checks, timings, pre vs post."""
    from casekit.model import to_plain
    from casekit.report.text import case_summary

    case = open_archive(archive).load(case_id)
    if as_json:
        typer.echo(json.dumps(to_plain(case), indent=2))
    else:
        typer.echo(case_summary(case))


@app.command()
def validate(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Bundle files [default: every bundle in the archive].")
    ] = None,
    archive: ArchiveOption = None,
) -> None:
    """Check bundles: TOML, schema version, every field, script hashes."""
    from casekit.bundle import load_case

    store = open_archive(archive)
    files = list(paths or [store.root / f"{i}.toml" for i in store.ids()])
    if not files:
        fail(f"no bundles to validate in {store.root}")
    bad = 0
    for path in files:
        try:
            case = load_case(path)
            if case.id != path.stem:
                raise CasekitError(f"{path}: field 'id': {case.id!r} does not match the file name")
            typer.echo(f"ok      {path}")
        except CasekitError as error:
            bad += 1
            typer.echo(f"invalid {error}")
    if bad:
        fail(f"{bad} of {len(files)} bundle(s) invalid", 1)


def build_specs(
    pythons: list[str],
    torches: list[str],
    runner: str | None,
    cuda: str | None,
    index_url: str | None,
    find_links: str | None,
    image: str | None,
    options: list[tuple[str, str]],
) -> list[TargetSpec]:
    specs = [TargetSpec(runner="python", python=p) for p in pythons]
    kind = runner or "venv"
    if kind == "python" and torches:
        raise CasekitError("--runner python takes --python PATH, not --torch")
    for version in torches:
        specs.append(
            TargetSpec(
                runner=kind,
                torch=version,
                cuda=cuda,
                index_url=index_url,
                find_links=find_links,
                image=image,
                options=tuple(options),
            )
        )
    if image and not torches:
        specs.append(TargetSpec(runner="docker", image=image, options=tuple(options)))
    if not specs:
        specs.append(TargetSpec(runner="python"))  # the local torch
    return specs


@app.command(epilog=REPLAY_EXAMPLES)
def replay(
    torch: Annotated[
        list[str] | None,
        typer.Option("--torch", help="A torch version for a managed target (repeatable; '2.13' = newest 2.13.x)."),
    ] = None,
    python: Annotated[
        list[str] | None, typer.Option("--python", help="An existing interpreter as a target (repeatable).")
    ] = None,
    runner: Annotated[
        str | None, typer.Option("--runner", help="How --torch targets are provided: venv (default) or docker.")
    ] = None,
    cuda: Annotated[str | None, typer.Option("--cuda", help="CUDA tag for --torch targets, e.g. cu124.")] = None,
    index_url: Annotated[str | None, typer.Option("--index-url", help="Package index for torch.")] = None,
    find_links: Annotated[str | None, typer.Option("--find-links", help="A folder of wheels to install from.")] = None,
    image: Annotated[str | None, typer.Option("--image", help="Docker: use this image as is.")] = None,
    case: Annotated[list[str] | None, typer.Option("--case", help="Replay only these case ids (repeatable).")] = None,
    archive: ArchiveOption = None,
    backend: Annotated[str | None, typer.Option("--backend", help="Override each case's recorded backend.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each run of a script may take.")] = 300.0,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Write the casekit.replay/1 JSON here (written whatever the exit code)."),
    ] = None,
    fail_on: Annotated[
        str, typer.Option("--fail-on", help="Exit 1 when a result reaches this severity: error, warn, info or never.")
    ] = "error",
    record: Annotated[
        bool, typer.Option("--record/--no-record", help="Append this replay to each bundle's history.")
    ] = True,
    pin_packages: Annotated[
        bool,
        typer.Option(
            "--pin-packages/--no-pin-packages",
            help="Install the library versions the cases recorded beside torch (managed targets).",
        ),
    ] = True,
    shard: Annotated[
        str | None, typer.Option("--shard", help="K/N: run a stable slice of the case x target matrix.")
    ] = None,
    base_image: Annotated[
        str | None,
        typer.Option(
            "--base-image",
            help="Docker: base image for the replay image (casekit-base:bookworm on hosts without a registry).",
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            help="Docker sandbox relaxation KEY=VALUE (network=bridge, memory=8g, pids=1024, read_only=false, gpus=all).",
        ),
    ] = None,
    commit: Annotated[
        bool, typer.Option("--commit", help="Commit the updated bundles with a message saying what changed.")
    ] = False,
) -> None:
    """Replay the archive on one or more targets and classify every break."""
    from casekit.replay import ReplayOptions, report_json
    from casekit.replay import replay as do_replay
    from casekit.report.text import replay_table, result_details

    if fail_on not in ("error", "warn", "info", "never"):
        fail(f"--fail-on must be error, warn, info or never, not {fail_on!r}")
    options_kv = []
    for item in allow or []:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--allow takes KEY=VALUE, not {item!r}")
        options_kv.append((key, value))
    if base_image:
        options_kv.append(("base_image", base_image))
    store = open_archive(archive)
    if commit:
        from casekit.gitarchive import require_repo

        require_repo(store.root)  # before a replay that can take minutes, not after
    cases = store.summaries(case, history=False)  # digests plan the run; only the cases it runs are parsed
    drafts = [c.id for c in cases if "draft" in c.tags and not case]
    if drafts:
        # imported drafts have no repro yet (their script only raises): nothing to replay
        typer.echo(f"skipping {len(drafts)} draft case(s) without a repro: {', '.join(drafts)}", err=True)
        cases = [c for c in cases if c.id not in drafts]
    all_case_ids = [c.id for c in cases]
    specs = build_specs(python or [], torch or [], runner, cuda, index_url, find_links, image, options_kv)
    matrix_filter = None
    if shard:
        from casekit.shard import parse_shard, select_shard

        k, n = parse_shard(shard)
        all_labels = [s.label for s in specs]
        matrix_filter = select_shard([c.id for c in cases], all_labels, k, n)
        cases = [c for c in cases if any(cid == c.id for cid, _ in matrix_filter)]
        specs = [s for s in specs if any(label == s.label for _, label in matrix_filter)]
        if not cases:
            typer.echo(f"shard {shard}: nothing to run")
            if json_out:
                empty = {
                    "schema": "casekit.replay/1",
                    "targets": [],
                    "results": [],
                    "shard": shard,
                    "matrix": {"cases": all_case_ids, "targets": all_labels},
                }
                json_out.write_text(json.dumps(empty, indent=2))
            raise typer.Exit(0)
    loaded = store.load_all([c.id for c in cases]) if cases else []
    typer.echo(
        f"replaying {len(cases)} case(s) on {len(specs)} target(s): " + ", ".join(s.label for s in specs), err=True
    )
    report = do_replay(
        loaded,
        specs,
        ReplayOptions(backend=backend, timeout=timeout, record=record, pin_packages=pin_packages),
        store,
        default_runner_factory,
        progress,
    )
    if matrix_filter is not None:
        for run in report.targets:
            run.results = [r for r in run.results if (r.case_id, run.label) in matrix_filter]
    data = report_json(report)
    if shard:
        data["shard"] = shard
        data["matrix"] = {"cases": all_case_ids, "targets": all_labels}
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(data, indent=2))
    for run in report.targets:
        typer.echo("")
        env = run.environment
        typer.echo(
            f"torch {env.get('torch', '?')}, python {env.get('python', '?')}, {len(run.results)} case(s) in {run.seconds:.1f} s"
        )
        if run.error:
            typer.echo(f"environment failed: {run.error}")
        for warning in run.warnings:
            typer.echo(f"warning: {warning}")
        typer.echo(replay_table(run.label, run.results))
        changed = [r for r in run.results if r.severity is not Severity.INFO or r.verdict != "unchanged"]
        for result in changed:
            typer.echo("")
            typer.echo(result_details(result))
    if commit and record:
        from casekit.gitarchive import commit_paths, replay_message

        typer.echo(commit_paths(store.root, [store.path_for(c.id) for c in cases], replay_message(report)))
    if json_out:
        typer.echo(f"\nwrote {json_out}")
    failed_targets = [run for run in report.targets if run.error]
    if failed_targets:  # an environment problem, not a verdict about the cases: exit 2
        for run in failed_targets:
            typer.echo(f"casekit: error: {run.label}: {run.error}", err=True)
        raise typer.Exit(2)
    worst = report.worst()
    if fail_on != "never" and worst.rank >= Severity(fail_on).rank:
        raise typer.Exit(1)


images_app = typer.Typer(help="Replay images for the docker runner: list, build, prune.", no_args_is_help=True)
app.add_typer(images_app, name="images")


@images_app.command("list")
def images_list() -> None:
    """The casekit replay images on the Docker engine (DOCKER_HOST is honoured)."""
    from casekit.images import list_images
    from casekit.report.text import table

    rows = [
        [
            ", ".join(r.tags) or r.id[:19],
            r.torch,
            r.cuda,
            r.python,
            r.base,
            f"{r.size_bytes / 1e9:.2f} GB",
            r.created[:19],
        ]
        for r in list_images()
    ]
    typer.echo(
        table(["image", "torch", "cuda", "python", "base", "size", "created"], rows) if rows else "no casekit images"
    )


@images_app.command("build")
def images_build(
    torch: Annotated[str, typer.Option("--torch", help="torch version to install in the image.")],
    cuda: Annotated[
        str | None, typer.Option("--cuda", help="CUDA tag (cu124...); default CPU / the index default.")
    ] = None,
    index_url: Annotated[str | None, typer.Option("--index-url", help="Package index for torch.")] = None,
    base_image: Annotated[
        str | None,
        typer.Option(
            "--base-image",
            help="Base image [default: python:3.11-slim, or the CUDA base for --cuda]; casekit-base:bookworm on hosts without a registry (see containers/make-base-image.sh).",
        ),
    ] = None,
) -> None:
    """Build (or reuse) the replay image for a torch version."""
    from casekit.images import ensure_image

    options = (("base_image", base_image),) if base_image else ()
    image = ensure_image(
        TargetSpec(runner="docker", torch=torch, cuda=cuda, index_url=index_url, options=options), progress
    )
    typer.echo(f"ready: {', '.join(image.tags) or image.id}")


@images_app.command("prune")
def images_prune() -> None:
    """Remove every casekit replay image."""
    from casekit.images import prune_images

    removed = prune_images(progress)
    typer.echo(f"removed {len(removed)} image(s)")


envs_app = typer.Typer(
    help="Managed virtual environments of the venv runner ($CASEKIT_CACHE/envs).", no_args_is_help=True
)
app.add_typer(envs_app, name="envs")


@envs_app.command("list")
def envs_list() -> None:
    """The cached environments: key, torch, state."""
    from casekit.report.text import table
    from casekit.runners.venv import envs_dir, list_envs

    rows = [
        [env.key, env.torch or "-", "ready" if env.complete else "incomplete (rebuilt on next use)"]
        for env in list_envs()
    ]
    typer.echo(table(["key", "torch", "state"], rows) if rows else f"no environments in {envs_dir()}")


@envs_app.command("remove")
def envs_remove(keys: Annotated[list[str], typer.Argument(help="Environment keys (see `casekit envs list`).")]) -> None:
    """Delete cached environments (a build in progress is waited for)."""
    from casekit.runners.venv import remove_env

    for key in keys:
        remove_env(key, progress=progress)
        typer.echo(f"removed {key}")


from casekit.cli_bisect import register as register_bisect  # noqa: E402
from casekit.cli_records import register as register_records  # noqa: E402

register_bisect(app)
register_records(app)


def main() -> None:
    """Console entry point: one clear line for every casekit error."""
    try:
        app()
    except CasekitError as error:
        typer.echo(f"casekit: error: {error}", err=True)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        typer.echo("casekit: interrupted; the archive holds only complete results", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
