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
from typing import Annotated

import typer

from casekit.cli import cases, environments, records
from casekit.cli import reduce as reduce_command
from casekit.cli import replay as replay_command
from casekit.cli import schedule as schedule_command
from casekit.cli.bisect import register as register_bisect
from casekit.cli.help import TeachingGroup, casekit_version
from casekit.errors import CasekitError
from casekit.runners.process import STOPPING, install_stop_handlers
from casekit.terminal import install as install_terminal

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
    rich_markup_mode=None,  # plain help: rich markup ate the [default: ...] notes
    cls=TeachingGroup,
    epilog=(
        "\b\nExamples:\n"
        "  casekit capture repro.py --fixed repro_fixed.py --title 'item() branch'\n"
        "  casekit replay --torch 2.5.1 --torch 2.13 --json out/replay.json\n"
        "  casekit report --results out/replay.json --format html --out out/report\n"
        "  casekit replay --record --commit      (append history to the bundles and commit)"
    ),
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"casekit {casekit_version()}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the casekit version and exit.", callback=_show_version, is_eager=True),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print results and errors only, no progress.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Print tool output (pip, uv, docker) and every result's detail.")
    ] = False,
) -> None:
    """Reproducible case archive and bisection for torch.compile graph breaks."""
    from casekit.progress import Verbosity, set_verbosity

    if quiet and verbose:
        raise typer.BadParameter("-q and -v contradict each other; give one")
    set_verbosity(Verbosity.QUIET if quiet else Verbosity.VERBOSE if verbose else Verbosity.NORMAL)


cases.register(app)
replay_command.register(app)
schedule_command.register(app)
environments.register(app)
register_bisect(app)
records.register(app)
reduce_command.register(app)


def main() -> None:
    """Console entry point: one clear line for every casekit error; nothing printed carries a control sequence."""
    install_terminal()  # first: every line after it, the error lines included, goes through the sanitiser
    install_stop_handlers()
    try:
        app(prog_name="casekit")  # `python -m casekit` too: help and errors name the command a user types
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
