"""Replay images: recipes and names (pure), then build failures, listing and reuse on a real engine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from casekit.errors import DockerUnavailable, EnvironmentFailed
from casekit.runners.docker import images
from casekit.runners.interface import TargetSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = os.environ.get("CASEKIT_TEST_BASE_IMAGE", "casekit-base:bookworm")
WHEELHOUSE = os.environ.get("CASEKIT_WHEELHOUSE", "/opt/wheels")


def test_default_recipe_is_cpu_torch_on_python_slim() -> None:
    recipe = images.recipe_for(TargetSpec(runner="docker", torch="2.13.0", options=(("ca_bundle", "none"),)))
    assert recipe.tag == "casekit-replay:torch-2.13.0-cpu"
    assert recipe.base_image == "python:3.11-slim"
    assert recipe.index_url is None and recipe.ca_bundle is None
    assert recipe.labels == {
        "casekit.torch": "2.13.0",
        "casekit.cuda": "cpu",
        "casekit.python": "3.11",
        "casekit.base": "python:3.11-slim",
        "casekit.extra": "numpy",  # every image has numpy: repro scripts and torch's numpy interop need it
    }


def test_cuda_tag_picks_the_pytorch_index_and_names_the_image() -> None:
    recipe = images.recipe_for(TargetSpec(runner="docker", torch="2.5.1", cuda="cu124", python="3.12"))
    assert recipe.index_url == "https://download.pytorch.org/whl/cu124"
    assert recipe.tag == "casekit-replay:torch-2.5.1-cu124"
    assert recipe.base_image == "python:3.12-slim"
    assert recipe.build_args["CUDA"] == "cu124"


def test_local_base_image_and_extras_change_the_name() -> None:
    spec = TargetSpec(
        runner="docker",
        torch="2.13.0",
        extra_packages=("numpy==2.1.0",),
        options=(("base_image", "casekit-base:bookworm"),),
    )
    recipe = images.recipe_for(spec)
    assert recipe.tag == "casekit-replay:torch-2.13.0-cpu-casekit-base-bookworm-numpy-2.1.0"
    assert recipe.labels["casekit.extra"] == "numpy==2.1.0"
    assert recipe.build_args["EXTRA_PACKAGES"] == "numpy==2.1.0"


def test_host_ca_bundle_is_passed_to_the_build_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "corp-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("CASEKIT_CA_BUNDLE", str(bundle))
    assert images.recipe_for(TargetSpec(runner="docker")).ca_bundle == bundle
    with pytest.raises(EnvironmentFailed, match="does not exist"):
        images.recipe_for(TargetSpec(runner="docker", options=(("ca_bundle", str(tmp_path / "missing.pem")),)))


def test_the_pip_wheelhouse_serves_image_builds_unless_one_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured, given = tmp_path / "configured", tmp_path / "given"
    configured.mkdir()
    given.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(configured))
    assert images.recipe_for(TargetSpec(runner="docker")).wheelhouse == configured
    assert images.recipe_for(TargetSpec(runner="docker", find_links=str(given))).wheelhouse == given
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "not-a-folder"))
    assert images.recipe_for(TargetSpec(runner="docker")).wheelhouse is None


def test_the_dockerfile_ships_inside_the_package() -> None:
    # Read through importlib.resources, as a wheel install reads it: not from the checkout's containers/.
    text = images.dockerfile_text().decode()
    assert "ARG TORCH_VERSION" in text and "/opt/casekit-venv" in text
    for build_arg in images.recipe_for(TargetSpec(runner="docker", torch="2.13.0")).build_args:
        assert f"ARG {build_arg}" in text


def test_wheelhouse_must_be_a_local_folder(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFailed, match="not a directory"):
        images.recipe_for(TargetSpec(runner="docker", find_links=str(tmp_path / "nowhere")))


def test_engine_down_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(DockerUnavailable, match="^cannot reach the Docker engine at unix://"):
        images.list_images()


# ------------------------------------------------------------ real engine


@pytest.fixture(scope="module")
def engine() -> Any:
    """The engine and the base image (.ci/docker-setup.sh); skip, or fail under CI, without them."""
    if not os.environ.get("DOCKER_HOST"):
        setup = subprocess.run([str(REPO_ROOT / ".ci" / "docker-setup.sh")], capture_output=True, text=True)
        if setup.returncode != 0:
            reason = (setup.stderr.strip().splitlines() or ["docker-setup.sh failed"])[-1]
            if os.environ.get("CASEKIT_REQUIRE_DOCKER"):
                pytest.fail(f"no Docker engine: {reason}")
            pytest.skip(f"no Docker engine: {reason}")
    try:
        return images.connect()
    except DockerUnavailable as error:
        if os.environ.get("CASEKIT_REQUIRE_DOCKER"):
            raise
        pytest.skip(str(error))


def torch_spec(**options: str) -> TargetSpec:
    return TargetSpec(
        runner="docker",
        torch="2.13.0",
        # The local CPU wheel when there is one, else PyTorch's CPU index (not PyPI's 2.5 GB CUDA build).
        find_links=WHEELHOUSE if Path(WHEELHOUSE).is_dir() else None,
        cuda=None if Path(WHEELHOUSE).is_dir() else "cpu",
        options=tuple({"base_image": BASE_IMAGE, **options}.items()),
    )


@pytest.mark.docker
def test_image_is_built_once_then_reused_and_listed(engine: Any) -> None:
    first = images.ensure_image(torch_spec(), lambda line: None, engine)
    lines: list[str] = []
    again = images.ensure_image(torch_spec(), lines.append, engine)
    assert again.id == first.id
    assert lines == [f"docker: reusing casekit-replay:torch-2.13.0-cpu-casekit-base-bookworm ({first.short_id})"]
    listed = {record.id: record for record in images.list_images(engine)}
    record = listed[first.short_id]
    assert (record.torch, record.cuda, record.python, record.base) == ("2.13.0", "cpu", "3.11", BASE_IMAGE)
    user = engine.containers.run(first.id, ["id", "-u"], remove=True, network_mode="none")
    assert user.strip() == b"10001"


@pytest.mark.docker
def test_network_failure_mid_build_is_one_line(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # No wheelhouse and no network inside the build: pip cannot fetch torch.
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    spec = TargetSpec(
        runner="docker",
        torch="2.13.0",
        extra_packages=("casekit-offline-probe==0.0",),  # a recipe no cached image answers to
        options=(("base_image", BASE_IMAGE), ("build_network", "none")),
    )
    progress: list[str] = []
    with pytest.raises(EnvironmentFailed) as raised:
        images.ensure_image(spec, progress.append, engine)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("building casekit-replay:torch-2.13.0-cpu-casekit-base-bookworm")
    assert "network failure during the build" in message
    assert any("Step" in line for line in progress)  # the build log streamed to progress


@pytest.mark.docker
def test_missing_base_image_without_registry_points_at_make_base_image(engine: Any) -> None:
    spec = TargetSpec(runner="docker", torch="2.13.0", options=(("base_image", "casekit-no-such-base:1"),))
    try:
        engine.images.get("casekit-no-such-base:1")
        pytest.skip("someone made casekit-no-such-base:1")
    except Exception:
        pass
    with pytest.raises(EnvironmentFailed) as raised:
        images.ensure_image(spec, lambda line: None, engine)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("base image casekit-no-such-base:1 is not on the engine and cannot be pulled")
    assert "containers/make-base-image.sh" in message


def test_build_steps_become_progress_counts_and_other_output_is_tool_output() -> None:
    from casekit.progress import _COUNT
    from casekit.runners.docker.images import _build_progress

    step = _build_progress("casekit-replay:x", "Step 3/7 : RUN pip install torch==2.13.0")
    assert step == "[build casekit-replay:x] 3/7 RUN pip install torch==2.13.0"
    count = _COUNT.match(step)
    assert count is not None and (count["label"], count["done"], count["total"]) == ("build casekit-replay:x", "3", "7")
    assert _build_progress("casekit-replay:x", "Collecting torch") == "  Collecting torch"
