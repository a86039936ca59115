"""Which runner provides a target: one line per runner, and the questions the core asks them.

`RUNNERS` maps a `--runner` name to its class (as nox's `ALL_VENVS` maps a
backend to its env class); each class declares its own facts (see
`interface.Runner`): whether it builds environments, where its torch versions
come from, its label, its replay flags, its `--allow` keys. Code outside
`casekit.runners` asks these functions, never a runner's name. None of the
runner modules imports the Docker SDK until a container is needed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from casekit.errors import CasekitError, RunnerError
from casekit.runners.docker.runner import DockerRunner
from casekit.runners.dynamo import variant_suffix
from casekit.runners.interface import Runner, TargetSpec, VersionSource
from casekit.runners.python import PythonRunner
from casekit.runners.torch_source.request import Channel
from casekit.runners.venv.runner import VenvRunner

RUNNERS: dict[str, type[Runner]] = {
    "python": PythonRunner,
    "venv": VenvRunner,
    "docker": DockerRunner,
}
DEFAULT_RUNNER = "venv"  # what provides a `--torch` version when no --runner is given


def runner_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(RUNNERS)


def runner_class(name: str, flag: str = "runner") -> type[Runner]:
    """The runner registered under `name`; RunnerError naming the choices (`flag`: how the user said it)."""
    try:
        return RUNNERS[name]
    except KeyError:
        raise RunnerError(f"unknown {flag} {name!r} (choose one of: {', '.join(RUNNERS)})") from None


def make_runner(spec: TargetSpec) -> Runner:
    """The runner named by `spec.runner`, ready for prepare()."""
    return runner_class(spec.runner)(spec)


def target_spec(runner: str, **fields: object) -> TargetSpec:
    """A spec for the runner named `runner` (with the host it runs on, where that is not here)."""
    return runner_class(runner).target(**fields)


def _first(fact: str, wanted: object) -> type[Runner]:
    for cls in RUNNERS.values():
        if getattr(cls, fact) == wanted:
            return cls
    raise RunnerError(f"no registered runner has {fact}={wanted!r}")  # only a broken registry gets here


def interpreter_runner() -> type[Runner]:
    """The runner of existing interpreters (`--python PATH`, `--python-for`, capture, bisect-commits)."""
    return _first("versions", VersionSource.INTERPRETERS)


def image_runner() -> type[Runner]:
    """The runner of given images (`--image` with no `--torch`)."""
    return _first("runs_images", True)


def interpreter_target(python: str | None = None, options: Sequence[tuple[str, str]] = ()) -> TargetSpec:
    """The target of an existing interpreter (None: casekit's own)."""
    return interpreter_runner().target(python=python, options=tuple(options))


def takes_interpreters(runner: str) -> bool:
    """Whether each of this runner's torch versions is an interpreter the user names (not an index listing)."""
    return runner_class(runner).versions is VersionSource.INTERPRETERS


def label(spec: TargetSpec) -> str:
    """The target's stable key (shard cells, merged documents, histories, bisect records)."""
    return runner_class(spec.runner).label_of(spec) + variant_suffix(spec.dynamo, spec.packages)


def as_built(spec: TargetSpec, torch_seen: object) -> TargetSpec:
    """The spec of the build that ran (its exact torch version), whose label is the target's key."""
    return runner_class(spec.runner).as_built(spec, torch_seen)


def display(spec: TargetSpec) -> str:
    """The target as progress lines and notices show it."""
    return runner_class(spec.runner).display_of(spec) + variant_suffix(spec.dynamo, spec.packages)


def replay_flags(spec: TargetSpec) -> list[str]:
    """The `casekit replay` flags that select this target again."""
    return runner_class(spec.runner).replay_flags(spec, say_runner=spec.runner != DEFAULT_RUNNER)


def nightlies_between(spec: TargetSpec, good: dt.date, bad: dt.date) -> tuple[list[str], list[str]]:
    """The nightlies from `good` to `bad` the spec's runner would provide (a bisection's candidates), and notes."""
    check_channel(spec.runner, Channel.NIGHTLY)
    return runner_class(spec.runner).nightlies_between(spec, good, bad)


def parse_allow(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--allow KEY=VALUE` items as spec options; CasekitError for one that is not KEY=VALUE."""
    options = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CasekitError(f"--allow takes KEY=VALUE, not {item!r}")
        options.append((key, value))
    return tuple(options)


def check_target(spec: TargetSpec) -> TargetSpec:
    """The spec, once its runner exists, knows every option key and provides its channel (before a long
    run, not in the middle)."""
    cls = runner_class(spec.runner)
    cls.check_options(spec.options)
    check_channel(cls.name, spec.channel)
    return spec


def check_channel(runner: str, channel: Channel) -> None:
    """RunnerError when this runner cannot provide builds of `channel`, naming the runners that can."""
    cls = runner_class(runner)
    if channel in cls.channels:
        return
    able = [name for name, other in RUNNERS.items() if channel in other.channels]
    remedy = f" (--runner {' or '.join(able)} does)" if able else ""
    raise RunnerError(f"--runner {cls.name} cannot provide {channel.value} builds of torch{remedy}")


def allow_help(runners: Sequence[str] | None = None) -> str:
    """--allow's help: the example keys of each runner (those sharing a sandbox and keys on one line)."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for name in runners if runners is not None else RUNNERS:
        cls = runner_class(name)
        groups.setdefault((cls.sandbox_name, cls.allow_examples), []).append(name)
    parts = []
    for (sandbox, examples), names in groups.items():
        if not examples:
            continue
        heading = "/".join(names) + (f" ({sandbox})" if sandbox and sandbox not in names else "")
        parts.append(f"{heading}: {', '.join(examples)}.")
    return "Relax the sandbox, KEY=VALUE (repeatable; docs/sandbox.md). " + " ".join(parts)
