"""The README's "A session" is what .ci/readme-session.sh runs in a `uv tool install` of the wheel.

The script is CI's (`.ci/run` calls it; it builds torch envs, so minutes); this test keeps it
honest without running it: every command of the README's session block has an invocation in the
script with the same subcommand, every option the README gives, and the same case argument, so a
command added to the README without being run as installed fails here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / ".ci" / "readme-session.sh"
SUBCOMMANDS = ("bisect-commits", "capture", "list", "show", "validate", "replay", "report", "bisect")


def _commands(text: str) -> list[list[str]]:
    """casekit invocations in shell text: continuations joined, comments dropped, split like the shell."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if "casekit " not in line or line.startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        if "casekit" in words:
            found.append(words[words.index("casekit") + 1 :])
    return found


def _shape(words: list[str]) -> tuple[str, set[str], str | None]:
    """(subcommand, its --options, its first positional argument) of one invocation."""
    sub = next((w for w in words if w in SUBCOMMANDS), "")
    after = words[words.index(sub) + 1 :] if sub else []
    options = {w.split("=", 1)[0] for w in after if w.startswith("--") and w != "--"}
    positional = next((w for w in after if not w.startswith("-")), None)
    return sub, options, positional if sub in ("show", "bisect") and positional not in (None,) else None


def readme_session() -> list[list[str]]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A session", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    return _commands(block)


def test_the_readme_session_is_found() -> None:
    subs = [_shape(words)[0] for words in readme_session()]
    assert subs.count("capture") == 3 and subs.count("replay") == 4 and "bisect-commits" in subs, subs


def test_every_readme_command_runs_in_the_session_script() -> None:
    script = [_shape(words) for words in _commands(SCRIPT.read_text(encoding="utf-8"))]
    missing = []
    for words in readme_session():
        sub, options, positional = _shape(words)
        if not any(s == sub and options <= o and (positional is None or p == positional) for s, o, p in script):
            missing.append(" ".join(words))
    assert not missing, "README commands the session script does not run: " + "; ".join(missing)


def test_the_session_runs_in_a_uv_tool_install_without_pip() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    assert "uv tool install" in text and "import pip" in text  # the tool env is checked to have no pip
    assert "bash .ci/readme-session.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_install_lines_compile_bytecode_and_show_a_cpu_build() -> None:
    """Without --compile-bytecode a `uv tool` install's torch warns on every run and imports in 9.5 s, not 3.4;
    the session installs as the README says and checks torch's bytecode is there."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install it for your own work", 1)[1].split("\n## ", 1)[0]
    blocks = [block.split("```", 1)[0] for block in install.split("```sh")[1:]]
    tool_installs = [line for block in blocks for line in block.splitlines() if line.startswith("uv tool install")]
    assert tool_installs and all("--compile-bytecode" in line for line in tool_installs), tool_installs
    assert any("--torch-backend cpu" in line for line in tool_installs), "no CPU build for a tool that traces on CPU"
    assert any(
        "download.pytorch.org/whl/cpu" in line for block in blocks for line in block.splitlines() if "pipx" in line
    )
    script = SCRIPT.read_text(encoding="utf-8")
    assert "uv tool install --quiet --compile-bytecode" in script and "torch/__pycache__/__init__.cpython-" in script
