"""A failure of casekit's own code inside the probe is casekit's, never the script's (issue 31).

A real capture and a real replay (torch 2.13.0 in subprocesses, the python runner's sandbox) of a script
that runs fine, with a probe planted to raise in its own code after the script ran (collecting Dynamo's
counters, in the compiled run): the capture is refused as casekit's failure, naming the probe's error and
where in probe.py it happened; the replay's verdict is casekit's failure (env_failed, "a casekit bug"),
never the script's status (compile_error, crashed, regressed). The unplanted probe is the control: the
same script captures clean and replays unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import casekit.runners.batch
from casekit.archive.store import Archive
from casekit.capture import CaptureRequest, ProbeFailed, capture
from casekit.model import ScriptStatus
from casekit.observe.interpret import CASEKIT_FAILED
from casekit.replay.run import ReplayOptions, replay
from casekit.runners.interface import PROBE_PATH, TargetSpec
from casekit.runners.registry import make_runner

pytestmark = pytest.mark.slow

SCRIPT = """\
import torch


@torch.compile(backend="eager")
def fn(x):
    y = x * 2
    print("half way")  # a graph break: the compiled run has counters to collect
    return y + 1


for _ in range(2):
    fn(torch.ones(3))
"""
PLANTED = "planted: casekit's own code fails after the script ran"
quiet = lambda message: None  # noqa: E731


def planted_probe(folder: Path) -> Path:
    """casekit's probe, with its counter collection (its own code, run after the script in a compiled run) raising."""
    source = PROBE_PATH.read_text()
    head = "def collect_counters(torch):\n"
    assert source.count(head) == 1
    folder.mkdir()
    planted = folder / "probe.py"
    planted.write_text(source.replace(head, head + f"    raise RuntimeError({PLANTED!r})\n"))
    return planted


def capture_script(folder: Path, archive: Archive):
    script = folder / "repro.py"
    script.write_text(SCRIPT)
    request = CaptureRequest(script=script, case_id="fine", title="a script that runs fine", fullgraph=False)
    return capture(request, make_runner(TargetSpec(runner="python")), archive, quiet)


def test_a_failure_planted_in_the_probe_is_reported_as_casekits_never_as_the_scripts(tmp_path, monkeypatch):
    archive = Archive(tmp_path / "cases")
    case = capture_script(tmp_path, archive)  # control: the real probe captures the script clean
    assert case.observations["pre"].status is ScriptStatus.OK, case.observations["pre"].detail

    monkeypatch.setattr(casekit.runners.batch, "PROBE_PATH", planted_probe(tmp_path / "planted"))

    report = replay([case], [TargetSpec(runner="python")], ReplayOptions(record=False), None, make_runner, quiet)
    (result,) = report.targets[0].results
    pre = result.scripts["pre"]
    assert pre.status is ScriptStatus.ENV_FAILED, (pre.status, pre.observation.detail)
    detail = pre.observation.detail
    assert detail.startswith(f"{CASEKIT_FAILED} in the compiled run at probe.py:"), detail
    assert "in collect_counters, not the script: RuntimeError: " + PLANTED in detail, detail
    assert "a casekit bug" in detail
    assert result.verdict == "env_failed", result.reasons
    assert any(reason.startswith(f"pre: {CASEKIT_FAILED}") for reason in result.reasons), result.reasons
    said = " ".join(result.reasons)
    for scripts_fault in ("compile_error", "crashed", "regressed", "environment failed", "did not finish"):
        assert scripts_fault not in said, (scripts_fault, result.reasons)

    with pytest.raises(ProbeFailed) as refused:
        capture_script(tmp_path, Archive(tmp_path / "second"))
    message = str(refused.value)
    assert message.startswith(f"pre-fix: {CASEKIT_FAILED} in the compiled run at probe.py:"), message
    assert PLANTED in message and message.endswith("nothing was written"), message
    assert not list((tmp_path / "second").glob("*.toml"))
