"""Two `casekit capture --id same` at once: exactly one saves, the other says so in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from casekit.archive.store import Archive

from ..conftest import ROOT

SCRIPT = """\
import torch

def f(x):
    return x.sin() + x.sum().item()

torch.compile(f, backend="eager")(torch.ones(3))
"""


@pytest.mark.slow
def test_concurrent_captures_with_the_same_id(tmp_path: Path) -> None:
    archive = tmp_path / "cases"
    scripts = []
    for i in range(2):
        script = tmp_path / f"repro{i}.py"
        script.write_text(SCRIPT + f"# capture {i}\n")
        scripts.append(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "casekit", "capture", str(script), "--id", "same", "--archive", str(archive)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script in scripts
    ]
    outputs = [process.communicate(timeout=600) for process in processes]
    codes = sorted(process.returncode for process in processes)
    assert codes == [0, 2], outputs
    loser = outputs[[process.returncode for process in processes].index(2)][1]
    assert "casekit: error: case 'same'" in loser and "Traceback" not in loser
    assert len(loser.strip().splitlines()[-1:]) == 1
    saved = Archive(archive).load("same")
    winner = [process.returncode for process in processes].index(0)
    assert saved.pre.source == scripts[winner].read_text()
    assert [p.name for p in archive.iterdir() if not p.name.startswith(".")] == ["same.toml"]
