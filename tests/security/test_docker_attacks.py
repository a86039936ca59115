"""The docker runner's claims under the same attacks as the bubblewrap sandbox: network by every route
against a listener on the host's loopback, and daemons that try to outlive their run."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from casekit.runners.interface import ProbeJob

from ..test_docker_runner import engine, replay_image, torch_spec  # noqa: F401 - fixtures shared with those tests
from .conftest import SCRIPTS, Listener
from .procs import wait_unmarked


def eager(result: Any, job_id: str) -> dict:
    return result.results[job_id]["runs"]["eager"]


@pytest.mark.slow
def test_docker_blocks_every_route_and_kills_daemons(
    engine: Any,  # noqa: F811
    replay_image: Any,  # noqa: F811
    loopback_listener: Listener,
) -> None:
    from casekit.runners.docker import DockerRunner

    token = f"casekit-docker-daemon-{uuid.uuid4().hex}"
    jobs = [
        ProbeJob("net.pre", SCRIPTS / "network_routes.py", modes=("eager",), argv=(str(loopback_listener.port),)),
        ProbeJob("daemons.pre", SCRIPTS / "daemons.py", modes=("eager",), argv=(token,)),
        ProbeJob("hang.pre", SCRIPTS / "daemons.py", modes=("eager",), argv=(token, "hang"), timeout=10),
        ProbeJob("census.pre", SCRIPTS / "census.py", modes=("eager",), argv=(token,)),
    ]
    result = DockerRunner(torch_spec(), client=engine).run_probe(jobs, lambda line: None)
    run = eager(result, "net.pre")
    line = next(x for x in run["stdout_tail"].splitlines() if x.startswith("CASEKIT-NET "))
    report = json.loads(line.split(" ", 1)[1])
    assert loopback_listener.contacts == []
    assert report["interfaces"] == ["lo"]
    for route, outcome in report["outcomes"].items():
        if route != "udp_sendto":
            assert outcome.startswith("blocked"), (route, outcome)
    assert "daemons started" in eager(result, "daemons.pre")["stdout_tail"]
    assert eager(result, "hang.pre")["status"] == "timeout"
    assert "CASEKIT-CENSUS 0" in eager(result, "census.pre")["stdout_tail"]  # gone after each run, not only at the end
    assert wait_unmarked(token, within=10) == []
