"""The Kubernetes manifest as written, on a real engine: its header's build-and-push commands make and push
each target's job image (the replay image with casekit in it), and each Job's command runs in that image
as the pod runs it (its user, a read-only root, no capabilities, no network), then the merge's.

No cluster and no registry image are reachable here: the registry is tests/registry.py on 127.0.0.1 (the
Registry API's push half, every blob checked against its digest), and the pod is `docker run` with the
pod's security context and volumes.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from casekit.runners.docker.job_image import write_casekit_wheel
from casekit.schedule.emit import K8S_ARCHIVE, K8S_RESULTS, K8S_TARGETS
from tests import registry
from tests.conftest import ROOT, run_casekit
from tests.docker_fixtures import BASE_IMAGE

STARTER = ROOT / "cases"


def test_the_wheel_of_the_running_casekit_installs_its_command_and_dependencies(tmp_path: Path) -> None:
    wheel = write_casekit_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert "casekit/runners/docker/Dockerfile.job" in names and "casekit/schedule/templates/k8s-job.yaml" in names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert "Requires-Dist: typer" in metadata and "Requires-Dist: uv" in metadata
    assert "casekit = casekit.cli:main" in entry_points


def _pod(engine_run: list[str], container: dict[str, Any], volumes: list[str], env: dict[str, str]) -> list[str]:
    """`docker run` of a pod's container as its securityContext and volumes say."""
    command = [*engine_run, "--user", "10001:10001", "--read-only", "--cap-drop", "ALL"]
    command += ["--security-opt", "no-new-privileges", "--network", "none", "--tmpfs", "/tmp"]
    for volume in volumes:
        command += ["-v", volume]
    for name, value in env.items():
        command += ["-e", f"{name}={value}"]
    return [*command, container["image"], *container["command"], *container["args"]]


@pytest.mark.docker
def test_the_manifests_images_are_built_and_pushed_as_its_header_says_and_its_jobs_run_in_them(
    engine: Any, replay_image: Any, tmp_path: Path
) -> None:
    archive = tmp_path / "cases"
    archive.mkdir()
    shutil.copy(STARTER / "item-branch.toml", archive)
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the claim, as the pods' fsGroup gets it
    with registry.serving() as pushed:
        prefix = f"{pushed.host}/team/"
        planned = run_casekit(
            "plan", "--archive", str(archive), "--runner", "docker", "--torch", "2.13.0", "--base-image", BASE_IMAGE,
            "--shards", "1", "--emit", "k8s", "--registry", prefix, "--out", str(tmp_path / "replay.yaml"),
        )  # fmt: skip
        assert planned.returncode == 0, planned.stderr
        text = (tmp_path / "replay.yaml").read_text()
        builds = [line[1:].strip() for line in text.splitlines() if line[1:].strip().startswith("casekit images build")]
        assert builds and builds[0] in planned.stderr  # the header and the terminal say the same command
        for command in builds:
            words = shlex.split(command)
            assert words[:3] == ["casekit", "images", "build"] and words[-3:] == ["--registry", prefix, "--push"]
            built = run_casekit(*words[1:], timeout=1800)
            assert built.returncode == 0, built.stdout + built.stderr
        documents = [doc for doc in yaml.safe_load_all(text) if doc]
        (job,) = [d for d in documents if d["kind"] == "Job" and d["spec"].get("completionMode") == "Indexed"]
        container = job["spec"]["template"]["spec"]["containers"][0]
        repository, _, tag = container["image"].removeprefix(f"{pushed.host}/").rpartition(":")
        manifest = pushed.manifest(repository, tag)
        assert manifest is not None, f"nothing pushed as {container['image']}: {sorted(pushed.manifests)}"
        layers = [layer["digest"] for layer in manifest["layers"]]
        assert layers and all(digest in pushed.blobs for digest in layers) and not pushed.refused
    assert "casekit.casekit" in engine.images.get(container["image"]).labels
    try:
        _run_the_jobs(archive, results, container, documents)
    finally:
        engine.images.remove(container["image"])  # the tag only: the layers are the replay image's and casekit's


def _run_the_jobs(archive: Path, results: Path, container: dict[str, Any], documents: list[dict[str, Any]]) -> None:
    """The Indexed Job's one shard in its image as the pod runs it, then the merge Job's container."""
    claim = [f"{archive}:{K8S_ARCHIVE}:ro", f"{results}:{K8S_RESULTS}"]
    shard = _pod(
        ["docker", "run", "--rm", "--tmpfs", f"{K8S_TARGETS}:uid=10001"],
        container,
        claim,
        {"JOB_COMPLETION_INDEX": "0", **{e["name"]: e["value"] for e in container["env"]}},
    )
    ran = subprocess.run(shard, capture_output=True, text=True, timeout=900, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "shard 1/1 from kubernetes indexed job: JOB_COMPLETION_INDEX=0" in ran.stderr
    (merge,) = [d for d in documents if d["kind"] == "Job" and d["metadata"]["name"].endswith("-merge")]
    merger = merge["spec"]["template"]["spec"]["containers"][0]
    merged = subprocess.run(
        _pod(["docker", "run", "--rm"], merger, [f"{results}:{K8S_RESULTS}"], {}),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stdout + merged.stderr
    document = json.loads((results / "merged.json").read_text())
    assert [(r["case"], r["verdict"]) for r in document["results"]] == [("item-branch", "unchanged")]
