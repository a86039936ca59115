"""The casekit command line: each command parses, calls one core function, renders.

Every CasekitError becomes one line on stderr and its exit code (2) in `main`;
nothing here holds logic a test would have to go through the CLI to reach.
The commands live by theme: cases (capture, list, show, validate), replay,
records (report, log, import, merge), environments (images, envs), and
bisection (`casekit.cli.bisect`).
"""

from __future__ import annotations

import signal
import sys

import typer

from casekit.cli import cases, environments, records
from casekit.cli import replay as replay_command
from casekit.cli.bisect import register as register_bisect
from casekit.errors import CasekitError
from casekit.runners.process import STOPPING, install_stop_handlers

app = typer.Typer(
    name="casekit",
    help=(
        "Reproducible case archive and bisection for torch.compile graph breaks.\n\n"
        "capture a triaged repro as a case; replay the archive on a new PyTorch to see,\n"
        "break by break, what is gone / moved / reappeared / persists / new; bisect to\n"
        "find the release or commit that changed a case."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

cases.register(app)
replay_command.register(app)
environments.register(app)
register_bisect(app)
records.register(app)


def main() -> None:
    """Console entry point: one clear line for every casekit error."""
    install_stop_handlers()
    try:
        app()
    except CasekitError as error:
        typer.echo(f"casekit: error: {error}", err=True)
        sys.exit(error.exit_code)
    except (KeyboardInterrupt, SystemExit) as stop:
        if not STOPPING.is_set() and isinstance(stop, SystemExit):
            raise
        signum = STOPPING.signum if STOPPING.is_set() else signal.SIGINT  # typer turns Ctrl-C into exit 130
        typer.echo(
            f"casekit: stopped by {signal.Signals(signum).name}; every process it started was killed, "
            "the archive holds only complete results",
            err=True,
        )
        sys.exit(128 + signum)


__all__ = ["app", "main"]
