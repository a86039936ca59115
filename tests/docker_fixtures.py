"""The Docker engine and the torch 2.13.0 replay image as fixtures, for every test that needs a real engine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from casekit.errors import DockerUnavailable
from casekit.runners.docker import images
from casekit.runners.interface import TargetSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = os.environ.get("CASEKIT_TEST_BASE_IMAGE", "casekit-base:bookworm")
WHEELHOUSE = os.environ.get("CASEKIT_WHEELHOUSE", "/opt/wheels")


def docker_engine() -> Any:
    """The engine, started with .ci/docker-setup.sh when needed; skip (or fail under CI) without one."""
    try:
        return images.connect()
    except DockerUnavailable as error:
        reason = str(error)
    if not os.environ.get("DOCKER_HOST"):
        setup = subprocess.run([str(REPO_ROOT / ".ci" / "docker-setup.sh")], capture_output=True, text=True)
        if setup.returncode == 0:
            return images.connect()
        reason = (setup.stderr.strip().splitlines() or [reason])[-1]
    if os.environ.get("CASEKIT_REQUIRE_DOCKER"):
        pytest.fail(f"no Docker engine: {reason}")
    pytest.skip(f"no Docker engine: {reason}")


def torch_spec(**changes: Any) -> TargetSpec:
    given = changes.pop("options", ())
    options = list(given.items()) if isinstance(given, dict) else list(given)  # a key may come twice (env)
    return TargetSpec(
        runner="docker",
        torch="2.13.0",
        # The local CPU wheel when there is one, else PyTorch's CPU index (not PyPI's 2.5 GB CUDA build).
        find_links=WHEELHOUSE if Path(WHEELHOUSE).is_dir() else None,
        cuda=None if Path(WHEELHOUSE).is_dir() else "cpu",
        options=(("base_image", BASE_IMAGE), *options),
        **changes,
    )
