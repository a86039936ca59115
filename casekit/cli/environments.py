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
) -> None:
    """Build (or reuse) the replay image for a torch version."""
    from casekit.runners.docker.images import ensure_image
    from casekit.runners.registry import image_runner

    options = (("base_image", base_image),) if base_image else ()
    with progress_view() as view:
        image = ensure_image(image_runner().target(torch=torch, cuda=cuda, index_url=index_url, options=options), view)
    typer.echo(f"ready: {', '.join(image.tags) or image.id}")


@images_app.command("prune", epilog=examples("casekit images prune"))
def images_prune() -> None:
    """Remove every casekit replay image."""
    from casekit.runners.docker.images import prune_images

    removed = prune_images(progress)
    typer.echo(f"removed {len(removed)} image(s)")


envs_app = typer.Typer(
    help="Managed virtual environments of the venv runner ($CASEKIT_CACHE/envs).",
    no_args_is_help=True,
    rich_markup_mode=None,
    epilog=examples("casekit envs list", "casekit envs remove KEY"),
)


@envs_app.command("list", epilog=examples("casekit envs list", "CASEKIT_CACHE=/scratch/casekit casekit envs list"))
def envs_list() -> None:
    """The cached environments: key, torch, state."""
    from casekit.report.text import table
    from casekit.runners.venv import envs_dir, list_envs

    rows = [
        [env.key, env.torch or "-", "ready" if env.complete else "incomplete (rebuilt on next use)"]
        for env in list_envs()
    ]
    typer.echo(table(["key", "torch", "state"], rows) if rows else f"no environments in {envs_dir()}")


@envs_app.command("remove", epilog=examples("casekit envs list", "casekit envs remove KEY [KEY...]"))
def envs_remove(keys: Annotated[list[str], typer.Argument(help="Environment keys (see `casekit envs list`).")]) -> None:
    """Delete cached environments (a build in progress is waited for)."""
    from casekit.runners.venv import remove_env

    for key in keys:
        remove_env(key, progress=progress)
        typer.echo(f"removed {key}")


def register(app: typer.Typer) -> None:
    """Add the images and envs command groups to the casekit app."""
    app.add_typer(images_app, name="images")
    app.add_typer(envs_app, name="envs")
