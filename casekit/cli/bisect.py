"""The `bisect` and `bisect-commits` commands: parse into one config, call the core, render.

Registered on the main app by `casekit.cli` (`register(app)`); every error is a
CasekitError, which the CLI's entry point turns into one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from casekit.cli.common import Allow, emit_json, examples, notice, open_archive, progress_view
from casekit.fsutil import STDOUT
from casekit.outcome import check_seconds

if TYPE_CHECKING:  # the bisection core (git, replay) is imported only when a command runs
    from casekit.bisect.plan import BisectOutcome


BISECT_EXAMPLES = examples(
    "casekit bisect item-branch --good 2.5.1 --bad 2.13.0",
    "casekit bisect item-branch --good 2.5.1 --bad 2.13.0 --site repro.py:8 --json out/bisect.json --html out/bisect.html",
    "casekit bisect item-branch --good 2.5.1 --bad 2.8.0 --status post",
    "casekit bisect item-branch --nightlies --good 2026-01-01 --bad 2026-02-01 --torch-repo ~/src/pytorch",
    "casekit bisect item-branch --good 2.5.1 --bad 2.13.0 --python-for 2.5.1=/opt/t251/bin/python --python-for 2.13.0=/opt/t213/bin/python",
    "casekit bisect item-branch --good 2.12.0 --bad 2.13.0 --perf slower:10%      (the first release 10% slower)",
)
BISECT_COMMITS_EXAMPLES = examples(
    "casekit bisect-commits --repo ~/src/model --good v1.2 --bad HEAD --site model.py:42 -- python train_step.py",
    "casekit bisect-commits --repo ~/src/model --good v1.2 --bad HEAD --case item-branch --json -",
)


# Options both bisect commands take, declared once.
JsonOut = Annotated[
    Path | None,
    typer.Option("--json", metavar="FILE", help="Write the casekit.bisect/1 report here; '-' prints it to stdout."),
]
HtmlOut = Annotated[
    Path | None,
    typer.Option(
        "--html",
        help="Write a static HTML page: each bisection (every case of --all) drawn as a strip of steps.",
    ),
]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the result cache.")]
CacheFile = Annotated[
    Path | None, typer.Option("--cache", help="Result cache file [default: $CASEKIT_CACHE/bisect-cache.json].")
]


def render(outcome: BisectOutcome, json_out: Path | None) -> None:
    """The text report, the JSON document for `--json -` (stdout holds it alone, the text goes to stderr),
    what was written, and the exit code the core decided."""
    to_stderr = json_out == STDOUT
    if outcome.interrupted:
        typer.echo(f"casekit: {outcome.text}", err=True)
        raise typer.Exit(outcome.exit_code)
    typer.echo("", err=to_stderr)
    typer.echo(outcome.text, err=to_stderr)
    if json_out == STDOUT:
        emit_json(outcome.document, STDOUT)
    for path in outcome.written:
        typer.echo(f"wrote {path}")
    for failure in outcome.write_failures:  # the results above stand
        typer.echo(f"casekit: error: {failure}", err=True)
    raise typer.Exit(outcome.exit_code)


def bisect(
    good: Annotated[str, typer.Option("--good", help="A torch version where the case behaves as it should.")],
    bad: Annotated[str, typer.Option("--bad", help="A later torch version where it does not.")],
    case_ids: Annotated[
        list[str] | None, typer.Argument(help="Case id(s) in the archive; several are bisected together.")
    ] = None,
    all_cases: Annotated[
        bool, typer.Option("--all", help="Bisect every case of the archive together (one env and probe per release).")
    ] = False,
    ahead: Annotated[
        int | None,
        typer.Option(
            "--ahead",
            help="Envs built in the background ahead of need (0: none) [default: 2 for several cases, 0 for one].",
        ),
    ] = None,
    versions: Annotated[
        str | None,
        typer.Option(
            "--versions", help="Candidates: 'a,b,c' or a file with one version per line [default: the package index]."
        ),
    ] = None,
    runner: Annotated[
        str | None,
        typer.Option(
            "--runner", help="How each version is provided: venv (default), docker, or python (with --python-for)."
        ),
    ] = None,
    python_for: Annotated[
        list[str] | None,
        typer.Option(
            "--python-for",
            help="VERSION=PATH: an existing interpreter with that torch (repeatable; implies --runner python).",
        ),
    ] = None,
    site: Annotated[
        str | None, typer.Option("--site", help="Follow one break: its class at FILE:LINE, or 'absent'.")
    ] = None,
    status: Annotated[str | None, typer.Option("--status", help="Follow a script's status: pre or post.")] = None,
    post_holds: Annotated[bool, typer.Option("--post-holds", help="Follow whether the post-fix still holds.")] = False,
    cuda: Annotated[
        str | None,
        typer.Option("--cuda", help="Build variant: cpu or a CUDA tag, e.g. cu124 [default: cpu without a GPU]."),
    ] = None,
    index_url: Annotated[
        str | None, typer.Option("--index-url", help="Package index for torch (and for listing versions).")
    ] = None,
    nightlies: Annotated[
        bool,
        typer.Option(
            "--nightlies",
            help="Bisect the nightly channel by date: --good/--bad YYYY-MM-DD; ends with the commit range between "
            "the two nightlies and a compare URL.",
        ),
    ] = False,
    torch_repo: Annotated[
        Path | None,
        typer.Option("--torch-repo", help="A PyTorch checkout: list the commits between the two nightlies from it."),
    ] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="Override the case's recorded backend.")] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Seconds each run may take [default: per case, derived from its capture]."),
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option("--archive", help="Archive folder of case bundles [default: $CASEKIT_ARCHIVE or ./cases]"),
    ] = None,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    no_cache: NoCache = False,
    retry_unknown: Annotated[
        bool, typer.Option("--retry-unknown", help="Re-run targets the cache knows as unknown.")
    ] = False,
    cache: CacheFile = None,
    dynamo: Annotated[
        list[str] | None,
        typer.Option(
            "--dynamo",
            metavar="NAME=VALUE",
            help="Set a torch._dynamo.config setting (or stance=NAME) in every run of every release "
            "(repeatable), e.g. nested_graph_breaks=True; a release that lacks the name is said so.",
        ),
    ] = None,
    perf: Annotated[
        str | None,
        typer.Option(
            "--perf",
            metavar="RULE:P%",
            help="Follow the repro's timing, not its breaks: the first release slower than the good end by the rule "
            "(slower:10% the steady state per call, compile-slower:15% the compile with warm caches, "
            "cold-compile-slower:20% with empty ones), each timed against the good end in the same window over "
            "fresh processes; inconclusive is unknown. Timed steps are never cached.",
        ),
    ] = None,
    perf_repeats: Annotated[
        str | None,
        typer.Option(
            "--perf-repeats",
            metavar="cold=N,warm=N",
            help="Fresh processes a side for each candidate and the good end [default: warm=5, more while a verdict "
            "is open; cold=0 for slower, 1 for compile-slower, 5 for cold-compile-slower].",
        ),
    ] = None,
    allow: Allow = None,
) -> None:
    """Find the first torch version between --good and --bad where the case's outcome changes."""
    from casekit.bisect.engine import CacheSettings
    from casekit.bisect.plan import BisectRequest, Outputs, perf_rule_for, predicate_for, run_bisect

    request = BisectRequest(
        good,
        bad,
        case_ids=tuple(case_ids or ()),
        all_cases=all_cases,
        ahead=ahead,
        versions=versions,
        runner=runner,
        python_for=tuple(python_for or ()),
        predicate=predicate_for(site, status, post_holds),
        cuda=cuda,
        index_url=index_url,
        nightlies=nightlies,
        torch_repo=torch_repo,
        backend=backend,
        timeout=timeout,
        archive_dir=archive,
        cache=CacheSettings.chosen(cache, off=no_cache, retry_unknown=retry_unknown),
        outputs=Outputs(json_out, html_out),
        dynamo=tuple(dynamo or ()),
        perf=perf_rule_for(perf, perf_repeats),
        allow=tuple(allow or ()),
    )
    with progress_view() as progress:
        outcome = run_bisect(request, open_archive(archive), progress, notice)
    render(outcome, json_out)


def bisect_commits_command(
    command: Annotated[
        list[str], typer.Argument(help="After --: the command to run at each commit, e.g. python model.py.")
    ],
    good: Annotated[str, typer.Option("--good", help="A commit (or ref) where things were as they should be.")],
    repo: Annotated[
        Path,
        typer.Option(
            "--repo", help="The git repository (never modified: each commit is checked out in a temporary worktree)."
        ),
    ] = Path("."),
    bad: Annotated[str, typer.Option("--bad", help="A later commit where they are not.")] = "HEAD",
    site: Annotated[
        str | None, typer.Option("--site", help="Judge each commit by whether a graph break happens at FILE:LINE.")
    ] = None,
    case_id: Annotated[
        str | None,
        typer.Option("--case", help="Judge each commit by how many of this case's recorded breaks are observed."),
    ] = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Judge each commit by the command's exit status (0 good, 125 skip, 1-127 bad), as git bisect run; not under the probe.",
        ),
    ] = False,
    python: Annotated[
        str | None,
        typer.Option(
            "--python", help="Interpreter that runs the probe [default: the command's python, else this one]."
        ),
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="torch.compile backend forced for the runs.")] = "eager",
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each run may take.")] = 300.0,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm/--no-warm", help="One probe (one torch import) for all commits, or a fresh one per commit."
        ),
    ] = True,
    archive: Annotated[Path | None, typer.Option("--archive", help="Archive folder for --case.")] = None,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    no_cache: NoCache = False,
    retry_unknown: Annotated[
        bool, typer.Option("--retry-unknown", help="Re-run commits the cache knows as unknown.")
    ] = False,
    cache: CacheFile = None,
) -> None:
    """Find the commit of your repository that introduced (or removed) a graph break.

    By default COMMAND is `[python] SCRIPT.py [ARGS]`: the last .py argument is
    the script the probe observes at each commit, run from the worktree's root.
    With --exit-code, COMMAND is any command, judged by its exit status.
    """
    from casekit.bisect.commits import CommitBisect
    from casekit.bisect.engine import CacheSettings
    from casekit.bisect.plan import Outputs, run_commit_bisect
    from casekit.bisect.predicates import CommitPredicate

    case = open_archive(archive).load(case_id) if case_id else None
    config = CommitBisect(
        repo,
        good,
        bad,
        command,
        judge=CommitPredicate(site=site, case=case, exit_code=exit_code),
        python=python,
        backend=backend,
        timeout=check_seconds("--timeout", timeout),
        cache=CacheSettings.chosen(cache, off=no_cache, retry_unknown=retry_unknown),
        warm=warm,
    )
    outputs = Outputs(json_out, html_out)
    with progress_view() as progress:
        outcome = run_commit_bisect(config, outputs, progress)
    render(outcome, json_out)


def register(app: typer.Typer) -> None:
    """Add `bisect` and `bisect-commits` to the casekit app."""
    app.command("bisect", epilog=BISECT_EXAMPLES)(bisect)
    app.command("bisect-commits", epilog=BISECT_COMMITS_EXAMPLES)(bisect_commits_command)
