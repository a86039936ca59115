"""The environment commands: `images` (docker runner) and `envs` (venv runner). Parse, call, render."""

from __future__ import annotations

from typing import Annotated

import typer

from casekit.cli.common import examples, progress, progress_view

images_app = typer.Typer(
    help="Replay images for the docker runner: list, build, prune.",
    no_args_is_help=True,
    rich_markup_mode=None,
    epilog=examples("casekit images list", "casekit images build --torch 2.13.0", "casekit images prune"),
)


@images_app.command("list", epilog=examples("casekit images list", "DOCKER_HOST=ssh://gpu-box casekit images list"))
def images_list() -> None:
    """The casekit replay images on the Docker engine (DOCKER_HOST is honoured)."""
    from casekit.report.text import table
    from casekit.runners.docker.images import list_images

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


@images_app.command(
    "build",
    epilog=examples(
        "casekit images build --torch 2.13.0",
        "casekit images build --torch 2.5.1 --cuda cu124",
        "casekit images build --torch 2.13.0 --base-image casekit-base:bookworm",
        "casekit images build --torch 2.13.0 --registry registry.example/team/ --push   (for plan --emit k8s)",
    ),
)
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
    registry: Annotated[
        str | None,
        typer.Option(
            "--registry",
            help="Also build the job image `plan --emit k8s` names: this one with casekit in it, tagged under "
            "this prefix (registry.example/team/).",
        ),
    ] = None,
    push: Annotated[bool, typer.Option("--push", help="Push the --registry image (`docker login` first).")] = False,
) -> None:
    """Build (or reuse) the replay image for a torch version; with --registry, the job image the
    Kubernetes manifest of `casekit plan --emit k8s` names, and with --push, push it there."""
    from casekit.errors import CasekitError
    from casekit.runners.docker.images import ensure_image
    from casekit.runners.docker.job_image import build_job_image, push_image
    from casekit.runners.registry import image_runner

    if push and not registry:
        raise CasekitError("--push pushes the --registry image: give --registry registry.example/team/")
    options = (("base_image", base_image),) if base_image else ()
    spec = image_runner().target(torch=torch, cuda=cuda, index_url=index_url, options=options)
    with progress_view() as view:
        if registry:
            name = build_job_image(spec, registry, view)
            digest = push_image(name, view) if push else None
        else:
            image = ensure_image(spec, view)
    if registry:
        typer.echo(f"ready: {name}" + (f", pushed ({digest})" if digest else " (not pushed: --push pushes it)"))
    else:
        typer.echo(f"ready: {', '.join(image.tags) or image.id}")


@images_app.command("prune", epilog=examples("casekit images prune"))
def images_prune() -> None:
    """Remove every casekit replay image."""
    from casekit.runners.docker.images import prune_images

    removed = prune_images(progress)
    typer.echo(f"removed {len(removed)} image(s)")


envs_app = typer.Typer(
    help="Managed virtual environments of the venv runner ($CASEKIT_CACHE/envs), and casekit's download caches.",
    no_args_is_help=True,
    rich_markup_mode=None,
    epilog=examples("casekit envs list", "casekit envs remove KEY", "casekit envs prune --older-than 30d"),
)


def _size(count: int) -> str:
    """Bytes as people read them: '512 KB', '7.3 MB', '5.21 GB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}" if unit == "GB" else f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _age(seconds: float) -> str:
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{seconds / scale:.0f} {unit} ago"
    return "just now"


@envs_app.command("list", epilog=examples("casekit envs list", "CASEKIT_CACHE=/scratch/casekit casekit envs list"))
def envs_list() -> None:
    """The cached environments with their size and last use, and the download caches.

    `size` counts each file once; `own` is what removing the env frees (uv hardlinks an env's files
    into its download cache, so an env's own cost can be far below its size)."""
    import datetime as dt

    from casekit.report.text import table
    from casekit.runners.venv import envs_dir, list_envs
    from casekit.runners.venv.cache import disk_usage, last_used, measured_roots
    from casekit.settings import cache_root, download_caches

    envs = list_envs()
    if not envs:
        typer.echo(f"no environments in {envs_dir()}")
    now = dt.datetime.now(dt.UTC)
    rows = []
    for env in envs:
        usage = disk_usage([env.path])
        used = last_used(env)
        rows.append(
            [
                env.key,
                env.torch or "-",
                _size(usage.total),
                _size(usage.own),
                _age((now - used).total_seconds()) if used else "-",
                "ready" if env.complete else "incomplete (rebuilt on next use)",
            ]
        )
    if rows:
        typer.echo(table(["key", "torch", "size", "own", "last use", "state"], rows))
    for cache in download_caches():
        size = _size(disk_usage([cache.path]).total) if cache.path.is_dir() else "0 B"
        whose = "casekit's; `casekit envs prune` clears it" if cache.own else f"yours, ${cache.variable}: left alone"
        typer.echo(f"download cache ({cache.installer}): {size} in {cache.path} ({whose})")
    total = disk_usage(measured_roots(cache_root()))
    typer.echo(
        f"everything casekit's envs take: {_size(total.total)} under {cache_root()}"
        + (" and the caches above" if len(measured_roots(cache_root())) > 1 else "")
        + " (hard links counted once; `casekit envs prune` reclaims)"
    )


@envs_app.command("remove", epilog=examples("casekit envs list", "casekit envs remove KEY [KEY...]"))
def envs_remove(keys: Annotated[list[str], typer.Argument(help="Environment keys (see `casekit envs list`).")]) -> None:
    """Delete cached environments (a build in progress is waited for)."""
    from casekit.runners.venv import remove_env

    for key in keys:
        link = remove_env(key, progress=progress)
        typer.echo(link or f"removed {key}")


@envs_app.command(
    "prune",
    epilog=examples(
        "casekit envs prune --older-than 30d     (envs unused for 30 days)",
        "casekit envs prune --keep 3             (all but the 3 used last)",
        "casekit envs prune --all                (everything casekit downloaded or built)",
        "casekit envs prune --keep 2 --older-than 7d --dry-run",
    ),
)
def envs_prune(
    older_than: Annotated[
        str | None, typer.Option("--older-than", metavar="AGE", help="Remove envs not used for AGE (30d, 12h, 2w).")
    ] = None,
    keep: Annotated[
        int | None, typer.Option("--keep", min=0, help="Keep the N envs used last; remove the rest.")
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Remove every env.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")] = False,
) -> None:
    """Remove envs (by age, by count, or all) and clear the download caches; say what that freed.

    The download caches are uv's and pip's under $CASEKIT_CACHE, casekit's own; one you named with
    UV_CACHE_DIR or PIP_CACHE_DIR is yours and stays. With both --keep and --older-than, an env goes when
    both say so."""
    from casekit.runners.venv.cache import parse_age, prune_envs

    age = parse_age(older_than) if older_than is not None else None
    with progress_view() as view:
        result = prune_envs(older_than=age, keep=keep, everything=everything, dry_run=dry_run, progress=view)
    for line in result.links:
        typer.echo(line)
    if dry_run:
        for key in result.removed:
            typer.echo(f"would remove {key}")
        typer.echo(
            f"would remove {len(result.removed)} env(s), keep {len(result.kept)}, and clear the download caches "
            f"({_size(result.before)} on disk now)"
        )
        return
    for key in result.removed:
        typer.echo(f"removed {key}")
    cleared = " and cleared the download caches" if result.caches_cleared else ""
    typer.echo(
        f"removed {len(result.removed)} env(s), kept {len(result.kept)}{cleared}: freed {_size(result.freed)} "
        f"({_size(result.before)} -> {_size(result.after)} on disk)"
    )
    clean = {"uv": "uv cache clean", "pip": "pip cache purge"}
    for cache, size in result.caches_left:
        typer.echo(
            f"left {cache.installer}'s cache {cache.path} alone ({_size(size)}): ${cache.variable} names it, so it is "
            f"yours; `{clean.get(cache.installer, 'its installer')}` clears it"
        )


def register(app: typer.Typer) -> None:
    """Add the images and envs command groups to the casekit app."""
    app.add_typer(images_app, name="images")
    app.add_typer(envs_app, name="envs")
