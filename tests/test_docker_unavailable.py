"""The docker runner without an engine: one clear line, no traceback (no engine needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from casekit.errors import DockerUnavailable, RunnerError
from casekit.runners.docker.runner import DockerRunner
from casekit.runners.interface import ProbeJob, TargetSpec


def test_unknown_option_is_refused() -> None:
    with pytest.raises(RunnerError, match="unknown docker option"):
        DockerRunner(TargetSpec(runner="docker", options=(("netwrk", "bridge"),)))


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    address = f"unix://{tmp_path}/no-such-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", address)
    yield address


@pytest.mark.parametrize("step", ["prepare", "run_probe"])
def test_engine_down_is_one_line(no_engine: str, step: str, tmp_path: Path) -> None:
    runner = DockerRunner(TargetSpec(runner="docker", torch="2.13.0"))
    script = tmp_path / "gb.py"
    script.write_text("print('never runs')\n")
    with pytest.raises(DockerUnavailable) as raised:
        if step == "prepare":
            runner.prepare(lambda line: None)
        else:
            runner.run_probe([ProbeJob(id="gb", script=script)], lambda line: None)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"cannot reach the Docker engine at {no_engine}: start dockerd or set DOCKER_HOST")


def test_container_wall_clock_is_the_host_probe_limit_plus_a_container_start(tmp_path: Path) -> None:
    from casekit.runners.docker.runner import CONTAINER_START_S
    from casekit.runners.process import overall_timeout

    jobs = [ProbeJob(id="a", script=tmp_path / "a.py", modes=("eager", "compiled"), timeout=30)]
    runner = DockerRunner(TargetSpec("docker"))  # no engine is contacted before prepare()
    assert runner._wall_timeout(jobs) == overall_timeout(jobs) + CONTAINER_START_S
    assert DockerRunner(TargetSpec("docker", options=(("timeout", "42"),)))._wall_timeout(jobs) == 42.0


def test_env_names_host_variables_to_pass_and_may_be_given_more_than_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASEKIT_TEST_PASSED", "from-the-host")
    monkeypatch.setenv("CASEKIT_TEST_OTHER", "not-asked")
    options = (("env", "CASEKIT_TEST_PASSED"), ("env", "CASEKIT_SET=a=b"), ("env", "CASEKIT_TEST_ABSENT"))
    runner = DockerRunner(TargetSpec("docker", options=options))  # no engine is contacted before prepare()
    environment = runner._environment()
    assert environment["CASEKIT_TEST_PASSED"] == "from-the-host" and environment["CASEKIT_SET"] == "a=b"
    assert "CASEKIT_TEST_OTHER" not in environment and "CASEKIT_TEST_ABSENT" not in environment
    with pytest.raises(RunnerError, match="env="):
        DockerRunner(TargetSpec("docker", options=(("env", "1BAD"),)))
