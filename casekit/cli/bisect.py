"""The `bisect` and `bisect-commits` commands: parse into one config, call the core, render.

Registered on the main app by `casekit.cli` (`register(app)`); every error is a
CasekitError, which the CLI's entry point turns into one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from casekit.cli.common import STDOUT, emit_json, examples, progress_view
from casekit.errors import BisectError
from casekit.outcome import check_seconds

if TYPE_CHECKING:  # the bisection core (git, replay) is imported only when a command runs
    from casekit.archive.store import Archive
    from casekit.bisect.predicates import Predicate
    from casekit.bisect.releases import ReleaseBisect
    from casekit.bisect.report import BisectReport


BISECT_EXAMPLES = examples(
    "casekit bisect item-branch --good 2.5.1 --bad 2.13.0",
    "casekit bisect item-branch --good 2.5.1 --bad 2.13.0 --site repro.py:8 --json out/bisect.json --html out/bisect.html",
    "casekit bisect item-branch --good 2.5.1 --bad 2.8.0 --status post",
    "casekit bisect item-branch --nightlies --good 2026-01-01 --bad 2026-02-01 --torch-repo ~/src/pytorch",
    "casekit bisect item-branch --good 2.5.1 --bad 2.13.0 --python-for 2.5.1=/opt/t251/bin/python --python-for 2.13.0=/opt/t213/bin/python",
)
BISECT_COMMITS_EXAMPLES = examples(
    "casekit bisect-commits --repo ~/src/model --good v1.2 --bad HEAD --site model.py:42 -- python train_step.py",
    "casekit bisect-commits --repo ~/src/model --good v1.2 --bad HEAD --case item-branch --json -",
)


def parse_python_for(items: list[str]) -> dict[str, str]:
    """['2.5.1=/opt/py/bin/python', ...] -> {'2.5.1': '/opt/py/bin/python'}."""
    mapping: dict[str, str] = {}
    for item in items:
        version, sep, path = item.partition("=")
        if not sep or not version.strip() or not path.strip():
            raise BisectError(f"--python-for takes VERSION=PATH (e.g. 2.5.1=/opt/py251/bin/python), not {item!r}")
        mapping[version.strip()] = path.strip()
    return mapping


def runner_for(runner: str | None, pythons: dict[str, str]) -> str:
    """--runner, or the runner of interpreters when --python-for maps versions to them (which only it takes)."""
    from casekit.runners import registry

    interpreters = registry.interpreter_runner().name
    kind = runner or (interpreters if pythons else registry.DEFAULT_RUNNER)
    if pythons and not registry.takes_interpreters(kind):
        raise BisectError(
            f"--python-for maps versions to interpreters for --runner {interpreters}, not --runner {kind}"
        )
    return kind


def parse_predicate(site: str | None, status: str | None, post_holds: bool) -> Predicate:
    """--site / --status / --post-holds (at most one) as the predicate to follow; the verdict by default."""
    from casekit.bisect.predicates import Predicate

    chosen = [name for name, given in (("--site", site), ("--status", status), ("--post-holds", post_holds)) if given]
    if len(chosen) > 1:
        raise BisectError(f"choose one of --site, --status and --post-holds, not {' and '.join(chosen)}")
    if site:
        return Predicate.parse(("site", site))
    if status:
        return Predicate.parse(("status", status))
    return Predicate.parse("post-holds" if post_holds else "verdict")


# Options both bisect commands take, declared once.
JsonOut = Annotated[
    Path | None,
    typer.Option("--json", metavar="FILE", help="Write the casekit.bisect/1 report here; '-' prints it to stdout."),
]
HtmlOut = Annotated[
    Path | None, typer.Option("--html", help="Write the bisection as a static HTML page (steps drawn as a strip).")
]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the result cache.")]
CacheFile = Annotated[
    Path | None, typer.Option("--cache", help="Result cache file [default: $CASEKIT_CACHE/bisect-cache.json].")
]


def _finish(report: BisectReport, json_out: Path | None, html_out: Path | None = None) -> None:
    from casekit.bisect.report import bisect_exit_code, render_text, report_to_json, write_report

    _print_and_write(
        render_text(report), lambda: report_to_json(report), lambda path: write_report(report, path), json_out
    )
    if html_out:
        from casekit.bundle import write_atomic as write_text_atomic
        from casekit.report.pictures import render_bisect_html

        write_text_atomic(html_out, render_bisect_html(report_to_json(report)))
        typer.echo(f"wrote {html_out}")
    raise typer.Exit(bisect_exit_code(report))


def _print_and_write(
    text: str, document: Callable[[], dict[str, Any]], write: Callable[[Path], None], json_out: Path | None
) -> None:
    """The text report, and the JSON document to `--json` (`-`: stdout holds the JSON alone, the text goes to stderr)."""
    to_stderr = json_out == STDOUT
    typer.echo("", err=to_stderr)
    typer.echo(text, err=to_stderr)
    if json_out == STDOUT:
        emit_json(document(), STDOUT)
    elif json_out:
        write(json_out)
        typer.echo(f"wrote {json_out}")


def _interrupted(cache_path: Path | None) -> typer.Exit:
    where = f" in {cache_path}" if cache_path else ""
    typer.echo(
        f"casekit: interrupted; finished steps are cached{where}: run the same command again to resume", err=True
    )
    return typer.Exit(130)


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
) -> None:
    """Find the first torch version between --good and --bad where the case's outcome changes."""
    from casekit.archive.store import Archive, archive_dir
    from casekit.bisect.ahead import Ahead
    from casekit.bisect.engine import CacheSettings, default_cache_path
    from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases
    from casekit.bisect.versions import read_version_list

    pythons = parse_python_for(python_for or [])
    kind = runner_for(runner, pythons)
    config = ReleaseBisect(
        good,
        bad,
        versions=read_version_list(versions) if versions else None,
        runner=kind,
        pythons=pythons,
        predicate=parse_predicate(site, status, post_holds),
        cuda=cuda,
        index_url=index_url,
        nightlies=nightlies,
        torch_repo=torch_repo,
        backend=backend,
        timeout=timeout,
        archive_dir=archive,
        cache=CacheSettings(None if no_cache else (cache or default_cache_path()), retry_unknown),
        ahead=Ahead(limit=_ahead_limit(ahead, 0)),
    )
    chosen = _chosen_cases(case_ids or [], all_cases)
    if len(chosen) > 1 or all_cases:
        _bisect_many(Archive(archive_dir(archive)), chosen, config, _ahead_limit(ahead, 2), json_out, html_out)
        return
    case = Archive(archive_dir(archive)).load(chosen[0])
    what = "nightlies" if nightlies else "torch"
    typer.echo(
        f"bisecting case {chosen[0]} between {what} {good} (good) and {bad} (bad) with the {kind} runner", err=True
    )
    try:
        with progress_view() as progress:
            report = bisect_releases(case, config, ReleaseSeams(progress=progress))
    except KeyboardInterrupt:
        raise _interrupted(config.cache.path) from None
    _finish(report, json_out, html_out)


def _ahead_limit(ahead: int | None, default: int) -> int:
    if ahead is not None and ahead < 0:
        raise BisectError(f"--ahead takes 0 or more, not {ahead}")
    return default if ahead is None else ahead


def _chosen_cases(case_ids: list[str], all_cases: bool) -> list[str]:
    """The ids named, or (with --all) none yet: the archive's; one clear error for what is missing."""
    if all_cases and case_ids:
        raise BisectError("give case ids or --all, not both")
    if not all_cases and not case_ids:
        raise BisectError("name the case(s) to bisect, or pass --all")
    return list(dict.fromkeys(case_ids))


def _bisect_many(
    archive: Archive,
    case_ids: list[str],
    config: ReleaseBisect,
    ahead: int,
    json_out: Path | None,
    html_out: Path | None,
) -> None:
    """Several cases over one candidate list: each report as a single bisection prints it, then the shared costs."""
    from casekit.bisect.releases import ReleaseSeams
    from casekit.bisect.report import multi_report_to_json, render_shared_text, shared_exit_code, write_multi_report
    from casekit.bisect.shared import Ahead, bisect_releases_many

    if html_out:
        raise BisectError("--html draws one bisection: give one case id (the --json document holds them all)")
    cases = archive.load_all(case_ids or None)
    if not cases:
        raise BisectError(f"the archive {archive.root} holds no cases to bisect")
    typer.echo(
        f"bisecting {len(cases)} case(s) together between torch {config.good} (good) and {config.bad} (bad) "
        f"with the {config.runner} runner",
        err=True,
    )
    try:
        with progress_view() as progress:
            shared = bisect_releases_many(cases, config, ReleaseSeams(progress=progress), Ahead(limit=ahead))
    except KeyboardInterrupt:
        raise _interrupted(config.cache.path) from None
    _print_and_write(
        render_shared_text(shared),
        lambda: multi_report_to_json(shared),
        lambda path: write_multi_report(shared, path),
        json_out,
    )
    raise typer.Exit(shared_exit_code(shared))


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
    from casekit.archive.store import Archive, archive_dir
    from casekit.bisect.commits import CommitBisect, bisect_commits
    from casekit.bisect.engine import CacheSettings, default_cache_path
    from casekit.bisect.predicates import CommitPredicate

    case = Archive(archive_dir(archive)).load(case_id) if case_id else None
    config = CommitBisect(
        repo,
        good,
        bad,
        command,
        judge=CommitPredicate(site=site, case=case, exit_code=exit_code),
        python=python,
        backend=backend,
        timeout=check_seconds("--timeout", timeout),
        cache=CacheSettings(None if no_cache else (cache or default_cache_path()), retry_unknown),
        warm=warm,
    )
    try:
        with progress_view() as progress:
            report = bisect_commits(config, progress=progress)
    except KeyboardInterrupt:
        raise _interrupted(config.cache.path) from None
    _finish(report, json_out, html_out)


def register(app: typer.Typer) -> None:
    """Add `bisect` and `bisect-commits` to the casekit app."""
    app.command("bisect", epilog=BISECT_EXAMPLES)(bisect)
    app.command("bisect-commits", epilog=BISECT_COMMITS_EXAMPLES)(bisect_commits_command)
