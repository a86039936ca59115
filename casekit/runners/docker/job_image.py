"""Job images: a target's replay image with casekit installed, named under a registry and pushed there.

The pods `casekit plan --emit k8s` writes run `casekit replay` and `casekit merge` in each target's image,
pulled from `--registry`. `casekit images build --torch V --registry R --push` makes that image (the
replay image, built or reused, plus casekit in a venv of its own: Dockerfile.job), tags it with the very
name the manifest names (R + the replay image's tag), and pushes it. The casekit installed is the one
running: its wheel is written from its own files and metadata, so a checkout or an install alike puts
exactly this casekit in the image.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import tempfile
import zipfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import casekit
from casekit.errors import EnvironmentFailed
from casekit.runners.docker import images
from casekit.runners.interface import ProgressFn, TargetSpec
from casekit.scrub import temp_prefix

if TYPE_CHECKING:
    import docker

_SKIPPED = ("__pycache__",)


def job_image_name(spec: TargetSpec, registry: str) -> str:
    """The name a target's pods pull: its --image as given, else `registry` + its replay image's tag."""
    if spec.image:
        return spec.image
    return registry + images.recipe_for(spec).tag


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _metadata(dist: importlib.metadata.Distribution) -> str:
    """The core metadata a wheel needs (name, version, Python, dependencies), from whatever the install
    recorded it in (a wheel's METADATA, a checkout's egg-info)."""
    lines = ["Metadata-Version: 2.1", "Name: casekit", f"Version: {dist.version}"]
    python = dist.metadata["Requires-Python"]
    if python:
        lines.append(f"Requires-Python: {python}")
    lines += [f"Provides-Extra: {extra}" for extra in dist.metadata.get_all("Provides-Extra") or ()]
    lines += [f"Requires-Dist: {requirement}" for requirement in dist.requires or ()]
    return "\n".join(lines) + "\n"


def write_casekit_wheel(folder: Path) -> Path:
    """A wheel of the casekit running now, in `folder`: its package's files (code, templates, the
    Dockerfiles), with its distribution's METADATA (version, dependencies) and entry points."""
    try:
        dist = importlib.metadata.distribution("casekit")
    except importlib.metadata.PackageNotFoundError:
        raise EnvironmentFailed("casekit is not installed as a distribution here: pip install it first") from None
    version = dist.version
    info = f"casekit-{version}.dist-info"
    files: dict[str, bytes] = {}
    package = Path(casekit.__file__).resolve().parent
    for path in sorted(package.rglob("*")):
        if path.is_file() and not any(part in _SKIPPED for part in path.parts) and path.suffix != ".pyc":
            files["casekit/" + path.relative_to(package).as_posix()] = path.read_bytes()
    files[f"{info}/METADATA"] = _metadata(dist).encode()
    scripts = [f"{point.name} = {point.value}" for point in dist.entry_points if point.group == "console_scripts"]
    files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(f"{line}\n" for line in scripts)).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: casekit\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return write_wheel(folder / f"casekit-{version}-py3-none-any.whl", files, info)


def write_wheel(path: Path, files: dict[str, bytes], dist_info: str) -> Path:
    """A wheel at `path` of `files` (archive name -> bytes, the dist-info's METADATA and WHEEL among them),
    with the RECORD of them all written last."""
    record = [_record(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in {**files, f"{dist_info}/RECORD": ("\n".join(record) + "\n").encode()}.items():
            archive.writestr(name, data)
    return path


def build_job_image(
    spec: TargetSpec, registry: str, progress: ProgressFn, client: docker.DockerClient | None = None
) -> str:
    """The target's replay image (built once, or reused) with casekit installed, tagged as its pods name
    it; returns that name. EnvironmentFailed in one line when a build fails."""
    from docker.errors import APIError, BuildError

    client = client or images.connect()
    replay = images.ensure_image(spec, progress, client)
    name = job_image_name(spec, registry)
    recipe = images.recipe_for(spec)
    progress(f"docker: building {name}: {replay.tags[0] if replay.tags else replay.short_id} with casekit in it …")
    dockerfile = (resources.files("casekit.runners.docker") / "Dockerfile.job").read_bytes()
    with tempfile.TemporaryDirectory(prefix=temp_prefix("build")) as context:
        folder = Path(context)
        images.fill_context(folder, recipe, dockerfile)
        wheel = write_casekit_wheel(folder / "wheels")
        tail: list[str] = []
        try:
            for line in images.stream_build(
                client, context, name, {"REPLAY_IMAGE": replay.id, "CASEKIT_VERSION": wheel.name.split("-")[1]}
            ):
                tail = (tail + [line])[-40:]
                progress(f"  {line}")
        except (BuildError, APIError) as error:
            why = images.build_failure(recipe, getattr(error, "msg", None) or str(error), tail)
            raise EnvironmentFailed(f"building {name} failed: {why}") from None
        finally:
            images.prune_install_stage(client)
    progress(f"docker: built {name}")
    return name


def push_image(name: str, progress: ProgressFn, client: docker.DockerClient | None = None) -> str:
    """Push `name` to its registry (the engine's credentials: `docker login` first); the digest pushed.
    EnvironmentFailed in one line naming the registry's own error."""
    import requests
    from docker.errors import APIError

    client = client or images.connect()
    repository, _, tag = name.rpartition(":")
    progress(f"docker: pushing {name} …")
    digest = ""
    try:
        for chunk in client.images.push(repository, tag=tag, stream=True, decode=True):
            event: dict[str, Any] = chunk if isinstance(chunk, dict) else {}
            if event.get("error"):
                raise EnvironmentFailed(f"pushing {name} failed: {event['error']}")
            aux = event.get("aux")
            if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                digest = aux["Digest"]
    except (APIError, requests.exceptions.RequestException) as error:
        raise EnvironmentFailed(f"pushing {name} failed: {images.first_line(error)}") from None
    if not digest:
        raise EnvironmentFailed(f"pushing {name}: the engine reported no digest, so nothing is known pushed")
    progress(f"docker: pushed {name} ({digest})")
    return digest
