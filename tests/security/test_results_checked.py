"""Results come back as files a script could have touched: each is checked (regular file, size, schema)
and a bad one is that script's failure, never the batch's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from casekit.runners import batch as batch_module
from casekit.runners.batch import PROBE_SCHEMA, lay_out_batch, read_batch, results_folder
from casekit.runners.interface import PROBE_PATH, ProbeJob


def good_result(job_id: str) -> dict:
    return {"schema": PROBE_SCHEMA, "job": job_id, "script": "x.py", "runs": {"eager": {"status": "ok"}}}


@pytest.mark.parametrize(
    "damage",
    ["not-json", "wrong-schema", "other-job", "runs-not-a-table", "symlink", "fifo", "huge", "folder"],
)
def test_a_damaged_result_fails_only_its_job(tmp_path: Path, damage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    jobs = [ProbeJob("victim.pre", script), ProbeJob("fine.pre", script)]
    batch_dir = tmp_path / "batch"
    lay_out_batch(batch_dir, jobs, str(batch_dir))
    out = batch_dir / "out"
    (out / "env.json").write_text(json.dumps({"ok": True, "environment": {"torch": "2.13.0"}, "import_s": 1.0}))
    (out / "fine.pre.result.json").write_text(json.dumps(good_result("fine.pre")))
    victim = out / "victim.pre.result.json"
    monkeypatch.setattr(batch_module, "MAX_RESULT_BYTES", 1024)
    if damage == "not-json":
        victim.write_text("{not json")
    elif damage == "wrong-schema":
        victim.write_text(json.dumps({**good_result("victim.pre"), "schema": "evil/1"}))
    elif damage == "other-job":
        victim.write_text(json.dumps(good_result("fine.pre")))
    elif damage == "runs-not-a-table":
        victim.write_text(json.dumps({**good_result("victim.pre"), "runs": {"eager": "ok"}}))
    elif damage == "symlink":
        victim.symlink_to("/dev/zero")
    elif damage == "fifo":
        os.mkfifo(victim)
    elif damage == "huge":
        victim.write_text(json.dumps({**good_result("victim.pre"), "pad": "x" * 5000}))
    else:
        victim.mkdir()
    with results_folder(batch_dir, "out") as folder:
        result = read_batch(folder, jobs)
    assert set(result.results) == {"fine.pre"}
    assert result.failed["victim.pre"].startswith("its result was tampered with or is unusable")
    assert result.environment == {"torch": "2.13.0"}


def test_a_damaged_environment_record_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    jobs = [ProbeJob("a.pre", script)]
    batch_dir = tmp_path / "batch"
    lay_out_batch(batch_dir, jobs, str(batch_dir))
    (batch_dir / "out" / "env.json").write_text("{not json")
    with results_folder(batch_dir, "out") as folder:
        result = read_batch(folder, jobs)
    assert result.failed["a.pre"].startswith("torch could not be imported: the probe's environment record is unusable")


@pytest.mark.process
@pytest.mark.parametrize("host", ["127.example.invalid", "127.0.0.1.nip.io", "192.0.2.1"])
def test_the_probe_second_layer_refuses_names_that_only_look_local(host: str) -> None:
    code = (
        "import socket, sys\n"
        f"sys.path.insert(0, {str(PROBE_PATH.parent)!r})\n"
        "import probe\n"
        "probe.block_network()\n"
        "try:\n"
        f"    socket.socket().connect(({host!r}, 80))  # refused before any name is resolved\n"
        "except PermissionError as error:\n"
        "    print('refused', error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("refused casekit: network access is disabled"), done.stdout + done.stderr
