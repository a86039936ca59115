"""Host secrets never reach a shared record, attacked end to end through the real CLI.

A script reads every secret it can find (variables, files in HOME, an absolute path a
teammate guessed) and, when it finds any, puts them in an exception message and in
the name of a function that graph-breaks, so they would land in the console, the
replay JSON, the bundle history that `replay --commit` commits, the reports, and
the output of `bisect-commits`. The control replays the same case unsandboxed and
finds the secrets in the JSON: the assertions below can fail.
"""

from __future__ import annotations

import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

from ..conftest import run_casekit
from .conftest import requires_sandbox

# the script names the secrets' absolute paths, as a teammate who knows the layout would: planted on purpose
pytestmark = [requires_sandbox, pytest.mark.slow, pytest.mark.plants_paths]

STEAL = """
import glob
import os
import re

import torch

found = []
for name in ("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"):
    if os.environ.get(name):
        found.append(os.environ[name])
for pattern in ("~/.ssh/*", "~/.config/*/*", {ssh!r}, {config!r}):
    for path in glob.glob(os.path.expanduser(pattern)):
        try:
            with open(path) as handle:
                found.append(handle.read().strip())
        except OSError:
            pass


@torch.compile(backend="eager")
def step(x):
    y = x * 2
    print("step")
    return y + 1


step(torch.ones(3))
if found:  # a frame named by the secrets, then an error that carries them
    token = re.sub(r"\\W", "_", "_".join(found))
    space = {{}}
    exec(f"def leak_{{token}}(x):\\n    print(x.sum())\\n    return x + 1\\n", space)
    torch.compile(space[f"leak_{{token}}"], backend="eager")(torch.ones(2))
    raise RuntimeError("stolen: " + " ".join(found))
"""


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def test_no_host_secret_reaches_console_json_bundle_history_report_or_bisect(tmp_path: Path) -> None:
    secrets = {name: f"casekit-{name}-{uuid.uuid4().hex}" for name in ("ssh", "config", "aws", "github")}
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".config" / "gh").mkdir(parents=True)
    ssh_key, config = home / ".ssh" / "id_ed25519", home / ".config" / "gh" / "hosts.yml"
    ssh_key.write_text(secrets["ssh"])
    config.write_text(secrets["config"])
    env = {
        "HOME": str(home),
        "CASEKIT_CACHE": str(tmp_path / "cache"),
        "AWS_SECRET_ACCESS_KEY": secrets["aws"],
        "GITHUB_TOKEN": secrets["github"],
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    repo = tmp_path / "model"
    repo.mkdir()
    script = repo / "steal.py"
    script.write_text(textwrap.dedent(STEAL.format(ssh=str(ssh_key), config=str(config))))
    git("init", "-q", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one", cwd=repo)
    script.write_text(script.read_text() + "\nprint('two')\n")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qam", "two", cwd=repo)
    archive = tmp_path / "archive"
    archive.mkdir()
    git("init", "-q", cwd=archive)
    out = tmp_path / "out"
    out.mkdir()

    said: list[str] = []

    def casekit(*args: str) -> subprocess.CompletedProcess[str]:
        done = run_casekit(*args, env=env, timeout=600)
        said.extend((done.stdout, done.stderr))
        return done

    captured = casekit("capture", str(script), "--archive", str(archive), "--id", "steal", "--title", "steals")
    assert captured.returncode == 0, captured.stderr
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", ".", cwd=archive)
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "capture", cwd=archive)
    replayed = casekit("replay", "--archive", str(archive), "--commit", "--json", str(out / "replay.json"))
    assert replayed.returncode in (0, 1), replayed.stderr
    reported = casekit(
        "report", "--archive", str(archive), "--results", str(out / "replay.json"), "--format", "html",
        "--format", "md", "--out", str(out / "report"),
    )  # fmt: skip
    assert reported.returncode in (0, 1), reported.stderr
    bisected = casekit(
        "bisect-commits", "--repo", str(repo), "--good", "HEAD~1", "--bad", "HEAD", "--site", "steal.py:24",
        "--json", str(out / "bisect.json"), "--no-cache", "--", "python", "steal.py",
    )  # fmt: skip
    assert "Traceback" not in bisected.stderr and (out / "bisect.json").is_file(), bisected.stderr

    records = [path.read_text(errors="replace") for path in out.rglob("*") if path.is_file()]
    records += [path.read_text(errors="replace") for path in archive.glob("*.toml")]
    records.append(git("log", "-p", "--all", cwd=archive))
    everything = "\n".join(said + records)
    assert "step" in everything and "steal" in everything  # the case really ran and was recorded
    for name, secret in secrets.items():
        assert secret not in everything, f"the {name} secret leaked"

    # control: the same case unsandboxed, with the variable passed, and the secrets are in the replay JSON
    control = casekit(
        "replay", "--archive", str(archive), "--allow", "sandbox=none", "--allow", "env=AWS_SECRET_ACCESS_KEY",
        "--json", str(out / "control.json"),
    )  # fmt: skip
    leaked = (out / "control.json").read_text()
    assert secrets["aws"] in leaked and secrets["ssh"] in leaked, control.stdout[-2000:]
