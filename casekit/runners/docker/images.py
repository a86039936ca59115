"""Replay images: build, find, list and prune the Docker images the docker runner uses.

One image holds one torch release in a venv (/opt/casekit-venv) on a base
image, built from the Dockerfile shipped beside this module (package data, so
a wheel install builds images too). An image is identified by its labels
(casekit.torch, casekit.cuda, casekit.python, casekit.base), so it is built once
and reused by every later replay of the same target.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from casekit import settings
from casekit.errors import DockerUnavailable, EnvironmentFailed
from casekit.runners.interface import ProgressFn, TargetSpec
from casekit.scrub import temp_prefix

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

DEFAULT_BASE_IMAGE = "python:{python}-slim"
DEFAULT_PYTHON = "3.11"
REPO = "casekit-replay"
VENV_ROOT = "/opt/casekit-venv"  # the replay image's venv: torch and the cases' pins
VENV_PYTHON = VENV_ROOT + "/bin/python"
BUILD_OPTIONS = ("base_image", "ca_bundle", "build_network")
JOB_LABEL = "casekit.casekit"  # on a job image (Dockerfile.job): the casekit version installed in it  # the TargetSpec options read here


def dockerfile_text() -> bytes:
    """The replay Dockerfile, read from the installed package (casekit/runners/docker/Dockerfile)."""
    try:
        return (resources.files(__package__) / "Dockerfile").read_bytes()
    except OSError as error:
        raise EnvironmentFailed(
            f"the replay Dockerfile is missing from the casekit package {__package__} ({error}): "
            "this casekit installation is incomplete"
        ) from None


def connect(host: str | None = None) -> docker.DockerClient:
    """A client for the engine at `host` (else the one DOCKER_HOST names, or the local socket); one clear
    error when unreachable. TLS settings (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) come from the environment."""
    import docker
    from docker.errors import DockerException

    where = host or settings.docker_host()
    try:
        client = docker.from_env(timeout=30, environment={**os.environ, "DOCKER_HOST": where})
        client.ping()
    except (DockerException, OSError) as error:
        raise DockerUnavailable(
            f"cannot reach the Docker engine at {where}: start dockerd or set DOCKER_HOST ({first_line(error)})"
        ) from None
    return client


@dataclass(frozen=True)
class ImageRecipe:
    """Everything an image is built from; the labelled part is its identity."""

    torch: str | None
    cuda: str  # "cpu" or a CUDA tag like "cu124"
    python: str
    base_image: str
    index_url: str | None = None
    wheelhouse: Path | None = None  # local wheels for air-gapped hosts
    ca_bundle: Path | None = None  # CA for pip behind a TLS-intercepting proxy
    extra_packages: tuple[str, ...] = ()
    build_network: str | None = None  # "none": the wheelhouse only, nothing fetched

    @property
    def labels(self) -> dict[str, str]:
        labels = {
            "casekit.torch": self.torch or "",
            "casekit.cuda": self.cuda,
            "casekit.python": self.python,
            "casekit.base": self.base_image,
        }
        if self.extra_packages:
            labels["casekit.extra"] = " ".join(self.extra_packages)
        return labels

    @property
    def tag(self) -> str:
        """casekit-replay:torch-2.13.0-cpu, plus the base and extras when not the defaults."""
        name = f"torch-{self.torch or 'latest'}-{self.cuda}"
        if self.base_image != DEFAULT_BASE_IMAGE.format(python=self.python):
            name += "-" + self.base_image
        extras = [p for p in self.extra_packages if p != "numpy"]  # numpy is in every image
        if extras:
            name += "-" + "-".join(extras)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
        return f"{REPO}:{name[:128]}"

    @property
    def build_args(self) -> dict[str, str]:
        return {
            "BASE_IMAGE": self.base_image,
            "PYTHON_VERSION": self.python,
            "TORCH_VERSION": self.torch or "",
            "CUDA": self.cuda,
            "INDEX_URL": self.index_url or "",
            "EXTRA_PACKAGES": " ".join(self.extra_packages),
        }


def recipe_for(spec: TargetSpec) -> ImageRecipe:
    """Turn a docker TargetSpec into a recipe.

    Options: base_image; ca_bundle (a path, or "none"; default: the host's bundle,
    so pip trusts what the host trusts); build_network ("none" for air-gapped builds).
    """
    options = dict(spec.options)
    python = spec.python if spec.python and not spec.python.startswith("/") else DEFAULT_PYTHON
    cuda = spec.cuda or "cpu"
    index_url = spec.index_url
    if index_url is None and spec.cuda:
        index_url = settings.pytorch_index_url(spec.cuda)
    # Like the venv runner: a wheelhouse pip is configured with (PIP_FIND_LINKS) serves image builds too.
    find_links = spec.find_links or settings.default_find_links()
    wheelhouse = Path(find_links).expanduser() if find_links else None
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise EnvironmentFailed(f"wheelhouse {wheelhouse} is not a directory (docker images take local wheels only)")
    return ImageRecipe(
        torch=spec.torch,
        cuda=cuda,
        python=python,
        base_image=options.get("base_image") or DEFAULT_BASE_IMAGE.format(python=python),
        index_url=index_url,
        wheelhouse=wheelhouse,
        ca_bundle=_ca_bundle(options.get("ca_bundle")),
        extra_packages=_with_numpy(tuple(spec.extra_packages)),
        build_network=options.get("build_network") or None,
    )


def _with_numpy(packages: tuple[str, ...]) -> tuple[str, ...]:
    """torch does not depend on numpy, but repro scripts (and torch's numpy interop) do."""
    if any(re.split(r"[=<>!~ ]", p, maxsplit=1)[0].lower() == "numpy" for p in packages):
        return packages
    return (*packages, "numpy")


def _ca_bundle(option: str | None) -> Path | None:
    if option:
        if option == "none":
            return None
        path = Path(option).expanduser()
        if not path.is_file():
            raise EnvironmentFailed(f"CA bundle {path} does not exist")
        return path
    return settings.host_ca_bundle()


def find_image(recipe: ImageRecipe, client: docker.DockerClient) -> Image | None:
    """The image built from this recipe, if present (matched by labels, not only by tag)."""
    filters = [f"{key}={value}" for key, value in recipe.labels.items()]
    for image in client.images.list(filters={"label": filters}):
        labels = image.labels or {}
        if JOB_LABEL in labels:
            continue  # a job image (casekit installed on top) is built from this one, never stands in for it
        # An image with extras must not stand in for one without.
        if ("casekit.extra" in labels) == bool(recipe.extra_packages):
            return image
    return None


def build_image(recipe: ImageRecipe, progress: ProgressFn, client: docker.DockerClient | None = None) -> Image:
    """Build the image (streaming the build log to progress); EnvironmentFailed with one line on failure."""
    import requests
    from docker.errors import APIError, BuildError

    client = client or connect()
    _ensure_base(recipe.base_image, progress, client)
    progress(f"docker: building {recipe.tag} on {recipe.base_image} …")
    with tempfile.TemporaryDirectory(prefix=temp_prefix("build")) as context:
        fill_context(Path(context), recipe)
        log_tail: list[str] = []
        try:
            for line in _stream_build(client, context, recipe):
                log_tail = (log_tail + [line])[-40:]
                progress(_build_progress(recipe.tag, line))
        except (BuildError, APIError) as error:
            why = build_failure(recipe, getattr(error, "msg", None) or str(error), log_tail)
            raise EnvironmentFailed(f"building {recipe.tag} failed: {why}") from None
        except requests.exceptions.RequestException as error:
            raise EnvironmentFailed(
                f"building {recipe.tag} failed: lost the Docker engine mid-build ({first_line(error)})"
            ) from None
        finally:
            prune_install_stage(client)
    image = find_image(recipe, client)
    if image is None:
        raise EnvironmentFailed(f"building {recipe.tag} finished but no image carries its labels")
    progress(f"docker: built {recipe.tag} ({image.short_id})")
    return image


def ensure_image(spec: TargetSpec, progress: ProgressFn, client: docker.DockerClient | None = None) -> Image:
    """The image for this target: spec.image when given, else the recipe's image, built on first use."""
    from docker.errors import ImageNotFound

    client = client or connect()
    if spec.image:
        try:
            return client.images.get(spec.image)
        except ImageNotFound:
            raise EnvironmentFailed(
                f"image {spec.image} is not present on the engine (docker pull or build it)"
            ) from None
    recipe = recipe_for(spec)
    image = find_image(recipe, client)
    if image is not None:
        progress(f"docker: reusing {recipe.tag} ({image.short_id})")
        return image
    return build_image(recipe, progress, client)


@dataclass(frozen=True)
class ImageRecord:
    """One casekit image as `casekit images list` shows it."""

    id: str
    tags: tuple[str, ...]
    torch: str
    cuda: str
    python: str
    base: str
    size_bytes: int
    created: str


def list_images(client: docker.DockerClient | None = None) -> list[ImageRecord]:
    """Every image labelled casekit.torch on the engine."""
    client = client or connect()
    records = []
    for image in client.images.list(filters={"label": "casekit.torch"}):
        labels = image.labels or {}
        records.append(
            ImageRecord(
                id=image.short_id,
                tags=tuple(image.tags),
                torch=labels.get("casekit.torch", ""),
                cuda=labels.get("casekit.cuda", ""),
                python=labels.get("casekit.python", ""),
                base=labels.get("casekit.base", ""),
                size_bytes=int(image.attrs.get("Size") or 0),
                created=str(image.attrs.get("Created") or ""),
            )
        )
    return sorted(records, key=lambda record: (record.torch, record.cuda, record.tags))


def prune_images(progress: ProgressFn, client: docker.DockerClient | None = None) -> list[str]:
    """Remove every casekit replay image (not the base image); returns the removed ids."""
    from docker.errors import APIError

    client = client or connect()
    removed = []
    for image in client.images.list(filters={"label": "casekit.torch"}):
        try:
            client.images.remove(image.id, force=True)
        except APIError as error:
            progress(f"docker: could not remove {image.short_id}: {first_line(error)}")
            continue
        progress(f"docker: removed {', '.join(image.tags) or image.short_id}")
        removed.append(image.short_id)
    prune_install_stage(client)
    return removed


# ------------------------------------------------------------------ internals


def _ensure_base(base_image: str, progress: ProgressFn, client: docker.DockerClient) -> None:
    """Pull the base when absent, so a host without a registry hears what to do instead."""
    import requests
    from docker.errors import APIError, ImageNotFound

    try:
        client.images.get(base_image)
        return
    except ImageNotFound:
        pass
    progress(f"docker: pulling {base_image} …")
    try:
        client.images.pull(base_image)
    except (APIError, requests.exceptions.RequestException) as error:
        raise EnvironmentFailed(
            f"base image {base_image} is not on the engine and cannot be pulled ({first_line(error)[:160]}): "
            "without a registry, build one with containers/make-base-image.sh and pass --base-image casekit-base:bookworm"
        ) from None


def prune_install_stage(client: docker.DockerClient) -> None:
    """Drop the install stage's dangling layers (a wheelhouse copy, the CA): 1 GB per build otherwise."""
    import requests
    from docker.errors import APIError

    try:
        client.images.prune(filters={"dangling": True, "label": "casekit.stage=install"})
    except (APIError, requests.exceptions.RequestException):
        pass  # another prune is running (or the busy engine answers late); the next build tries again


def fill_context(context: Path, recipe: ImageRecipe, dockerfile: bytes | None = None) -> None:
    """A build context: the Dockerfile (the replay image's unless given), wheels/ (the recipe's wheelhouse,
    maybe empty) and ca/ (its CA bundle, maybe empty)."""
    (context / "Dockerfile").write_bytes(dockerfile if dockerfile is not None else dockerfile_text())
    wheels = context / "wheels"
    wheels.mkdir()
    (wheels / ".keep").touch()  # COPY needs the folder even when empty
    if recipe.wheelhouse is not None:
        for wheel in sorted(recipe.wheelhouse.iterdir()):
            if wheel.is_file() and wheel.suffix in (".whl", ".gz", ".zip"):
                _link_or_copy(wheel, wheels / wheel.name)
    ca = context / "ca"
    ca.mkdir()
    (ca / ".keep").touch()
    if recipe.ca_bundle is not None:
        shutil.copyfile(recipe.ca_bundle, ca / "ca.pem")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # a 200 MB wheel: no copy when on the same disk
    except OSError:
        shutil.copy2(source, target)


def _stream_build(client: docker.DockerClient, context: str, recipe: ImageRecipe) -> Iterator[str]:
    """The replay image's build, a log line at a time."""
    return stream_build(client, context, recipe.tag, recipe.build_args, recipe.labels, recipe.build_network)


def stream_build(
    client: docker.DockerClient,
    context: str,
    tag: str,
    buildargs: dict[str, str],
    labels: dict[str, str] | None = None,
    network: str | None = None,
) -> Iterator[str]:
    """Build through the low-level API so each log line reaches progress as it comes."""
    from docker.errors import BuildError

    stream = client.api.build(
        path=context,
        tag=tag,
        buildargs=buildargs,
        labels=labels,
        rm=True,
        forcerm=True,
        decode=True,
        network_mode=network,
    )
    pending = ""
    for chunk in stream:
        chunk = _as_dict(chunk)
        if "error" in chunk:
            raise BuildError(chunk.get("error") or "build failed", build_log=[])
        pending += str(chunk.get("stream") or "")
        *lines, pending = pending.split("\n")
        for line in lines:
            if line.strip():
                yield line.rstrip()
    if pending.strip():
        yield pending.rstrip()


def _as_dict(chunk: Any) -> dict[str, Any]:
    return chunk if isinstance(chunk, dict) else {}


# Substrings that say the build could not reach the network, most telling first.
_NETWORK_HINTS = (
    "CERTIFICATE_VERIFY_FAILED",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "Connection reset",
    "Read timed out",
    "ProxyError",
    "no such host",
    "dial tcp",
)


def build_failure(recipe: ImageRecipe, message: str, log_tail: list[str]) -> str:
    """One line: why (network, missing base, pip's own error), not the whole RUN command."""
    text = "\n".join(log_tail + [message])
    network = next((hint for hint in _NETWORK_HINTS if hint in text), None)
    stated = [line.strip() for line in log_tail if line.strip().startswith(("ERROR:", "casekit:", "error:"))]
    detail = stated[-1] if stated else first_line(message)[:200]
    if network:
        return f"network failure during the build ({network}): {detail}"
    return detail


_BUILD_STEP = re.compile(r"^Step (?P<done>\d+)/(?P<total>\d+) : (?P<what>.*)$")


def _build_progress(tag: str, line: str) -> str:
    """A build step as "[tag] K/N what" (a bar on a terminal, one line per step elsewhere); other output
    indented, as tool output (shown with -v)."""
    step = _BUILD_STEP.match(line.strip())
    if step:
        return f"[build {tag}] {step['done']}/{step['total']} {step['what'][:80]}"
    return f"  {line}"


def first_line(error: object) -> str:
    text = str(error).strip()
    return (text.splitlines() or [type(error).__name__])[0][:400]
