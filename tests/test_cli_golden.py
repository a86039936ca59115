"""Golden transcripts of the main read commands on a fixed archive (a real capture plus two replays).

Regenerate after an intended change of the output with CASEKIT_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os

import pytest

from .conftest import FIXTURES, run_casekit

ARCHIVE = FIXTURES / "report" / "archive"
GOLDEN = FIXTURES / "golden"


@pytest.mark.process
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("list", ["list"]),
        ("show-item-branch", ["show", "item-branch"]),
        ("show-logging-in-forward", ["show", "logging-in-forward"]),
        ("validate", ["validate"]),
    ],
)
def test_golden_transcript(name: str, args: list[str]):
    result = run_casekit(*args, "--archive", str(ARCHIVE))
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(ARCHIVE), "<archive>")
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("CASEKIT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.process
def test_golden_merge_transcript():
    """`merge` renders with the one replay table (site classes in canonical order, not alphabetical)."""
    results = FIXTURES / "report" / "replay-torch-2.5.1.json"
    result = run_casekit("merge", str(results), "--fail-on", "never")
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(results.parent), "<fixtures>")
    golden = GOLDEN / "merge.txt"
    if os.environ.get("CASEKIT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


# ------------------------------------------------------------------ help, version, replay text
#
# In-process (typer's CliRunner) with the environment a CI log has: NO_COLOR, a fixed
# width, no terminal. Help text is plain click help, so the same bytes come back there.

PLAIN = {"NO_COLOR": "1", "COLUMNS": "80", "TERM": "dumb"}


def _commands() -> list[list[str]]:
    import typer.main

    from casekit.cli import app

    group = typer.main.get_command(app)
    found = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        found.append([name])
        found += [[name, sub] for sub in getattr(command, "commands", {})]
    return found


COMMANDS = _commands()


def _invoke(args: list[str], **kwargs: object):
    from typer.testing import CliRunner

    from casekit.cli import app

    return CliRunner().invoke(app, args, prog_name="casekit", env=PLAIN, **kwargs)  # type: ignore[arg-type]


def _check_golden(name: str, text: str) -> None:
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("CASEKIT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_every_command_is_covered_by_a_help_transcript():
    """A new command cannot slip past the transcripts below."""
    names = {" ".join(args) for args in COMMANDS}
    assert {"capture", "list", "show", "validate", "replay", "report", "log", "import", "merge"} <= names
    assert {"images build", "envs remove", "bisect", "bisect-commits"} <= names


@pytest.mark.parametrize("args", [[], *COMMANDS], ids=lambda args: "-".join(args) or "casekit")
def test_golden_help(args: list[str]):
    done = _invoke([*args, "--help"])
    assert done.exit_code == 0, done.output
    assert "\x1b[" not in done.output  # no escape codes in a log
    assert "<list[str]>" not in done.output and "<bool>" not in done.output
    _check_golden("help-" + ("-".join(args) or "casekit"), done.output)


@pytest.mark.parametrize("args", [[], *COMMANDS], ids=lambda args: "-".join(args) or "casekit")
def test_every_help_teaches_by_example(args: list[str]):
    """Each --help ends with runnable examples, and every declared default is visible."""
    text = _invoke([*args, "--help"]).output
    assert "Examples:\n" in text
    examples = [line.strip() for line in text.split("Examples:\n", 1)[1].splitlines() if line.strip()]
    assert examples and all(line.startswith("casekit ") or "=" in line.split()[0] for line in examples)


def test_help_shows_the_defaults_rich_markup_used_to_eat():
    text = _invoke(["capture", "--help"]).output
    assert "[default: $CASEKIT_ARCHIVE or ./cases]" in " ".join(text.split())
    assert "Interpreter to run the probe with [default: this one]." in " ".join(text.split())
    assert "--timeout SECONDS" in text and "--tag TEXT" in text


def test_golden_version():
    from importlib import metadata

    done = _invoke(["--version"])
    assert done.exit_code == 0
    assert done.output == f"casekit {metadata.version('casekit')}\n"
    _check_golden("version", done.output.replace(metadata.version("casekit"), "<version>"))


def test_golden_replay_text_with_an_error_a_warning_and_a_failed_target(tmp_path, monkeypatch):
    """The replay a person reads: each non-info verdict with its reasons; the failed target's error once, no table.

    The runs are served by the fake runner (recorded real-torch probe results), so the
    transcript is deterministic; capture, classification and rendering are the real code.
    """
    import re

    import casekit.cli.replay as replay_command

    from .fakes import Target, captured_archive, recorded_targets

    store = captured_archive(tmp_path / "cases")
    targets = {
        "t-2.13.0": Target("2.13.0", serve_as={"deepcopy_state": "breaks"}),  # a broken fix (error), a new break (warn)
        "t-broken": Target("2.13.0", prepare_error="no torch 9.9 wheel for cp311 on the index"),
    }
    _, factory, _ = recorded_targets(targets)
    monkeypatch.setattr(replay_command, "default_runner_factory", factory)
    args = [
        "replay",
        "--archive",
        str(store.root),
        "--python",
        "t-2.13.0",
        "--python",
        "t-broken",
        "--fail-on",
        "never",
    ]
    done = _invoke(args)
    assert done.exit_code == 2, done.output  # a failed target is exit 2 whatever --fail-on says
    text = re.sub(r" in \d+\.\d s\b", " in <seconds>", done.stdout.replace(str(tmp_path), "<tmp>"))
    assert text.count("no torch 9.9 wheel") == 1  # once, and never over a table
    assert "casekit: error: 1 target(s) could not run: python:t-broken" in done.stderr
    for line in text.splitlines():
        if line.endswith((": changed (warn)", ": fix_broken (error)", ": regressed (error)")):
            block = text.split(line, 1)[1].split("\n\n", 1)[0]
            assert "\n  why: " in block, line  # every non-info verdict says why
    _check_golden("replay-error-warning-failed-target", text)
