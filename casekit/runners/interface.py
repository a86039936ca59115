"""The runner interface: what provides a target environment and runs the probe in it.

A runner turns a `TargetSpec` into a ready environment (`prepare`), then runs
the probe there on a batch of scripts (`run_probe`). Each runner class also
declares its facts (whether it builds environments, where its torch versions
come from, its label, its replay flags, its `--allow` keys), so the core asks
the runner instead of testing its name. Implementations: `python` (an existing
interpreter), `venv` (managed, cached), `docker` (an image, sandboxed). Adding
one is one new file plus a line in `registry`.
"""

from __future__ import annotations

import abc
import datetime as dt
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from packaging.version import InvalidVersion, Version

from casekit.errors import RunnerError
from casekit.model import IncludedFile
from casekit.runners.dynamo import config_of, variant_suffix
from casekit.runners.torch_source.request import Channel, describe, format_torch_request
from casekit.runners.turns import Turns

PROBE_PATH = Path(__file__).resolve().parent.parent / "probe.py"


@dataclass(frozen=True)
class TargetSpec:
    """One (python, torch, CUDA) combination and how it is provided."""

    runner: str  # a name in casekit.runners.registry.RUNNERS
    # requested version ("2.13", "2.5.1"; a nightly's date "2026-01-05"); None = the newest / the interpreter's
    torch: str | None = None
    python: str | None = None  # interpreter path (python runner) or version ("3.11") for managed targets
    cuda: str | None = None  # the variant: "cpu", a CUDA tag ("cu124"); None = the runner decides (CPU when no GPU)
    index_url: str | None = None
    find_links: str | None = None
    image: str | None = None  # docker: an explicit image to use
    extra_packages: tuple[str, ...] = ()  # "name==version" pins installed beside torch
    options: tuple[tuple[str, str], ...] = ()  # runner-specific relaxations (--allow KEY=VALUE)
    host: str | None = None  # where the target runs when not this machine (a remote engine); None = here
    channel: Channel = Channel.RELEASE  # which stream of builds `torch` is asked in (release, pypi, nightly, test)
    dynamo: tuple[tuple[str, str], ...] = ()  # torch._dynamo.config NAME=VALUE set in every run (--dynamo)
    packages: tuple[str, ...] = ()  # library pins given for this target (--package): they replace the cases'


class VersionSource(enum.Enum):
    """Where a runner's torch versions come from when a bisection lists its candidates."""

    INDEX = "index"  # the package index lists them; the runner builds an environment for each
    INTERPRETERS = "interpreters"  # the interpreters the user gives, one per version (--python-for)


@dataclass
class ProbeJob:
    """One script for the probe to observe."""

    id: str
    script: Path
    modes: tuple[str, ...] = ("eager", "compiled")
    backend: str | None = "eager"
    timeout: float = 300.0
    seed: int = 0
    allow_network: bool = False
    argv: tuple[str, ...] = ()
    includes: tuple[IncludedFile, ...] = ()  # laid out beside the script (relative paths)
    dynamo_config: tuple[tuple[str, str], ...] = ()  # the target's --dynamo settings, set before each run
    # a whole folder laid out as the job's (a commit's tree: the script is inside it, and each run starts in
    # a fresh copy of it, from its root, as the user's command did); None: the script alone, with `includes`
    tree: Path | None = None
    perf: Mapping[str, object] | None = None  # a perf run's measurement: cache cold/warm, blocks (casekit.perf)
    # a perf run that takes its blocks in turns with runs on other sessions (casekit.runners.turns); only a
    # warm session (`supports_turns`) makes its FIFOs
    turns: Turns | None = field(default=None, compare=False, repr=False)

    def to_request(self, script_path: str) -> dict[str, object]:
        request: dict[str, object] = {
            "id": self.id,
            "script": script_path,
            "modes": list(self.modes),
            "backend": self.backend,
            "timeout": self.timeout,
            "seed": self.seed,
            "allow_network": self.allow_network,
            "argv": list(self.argv),
        }
        if self.dynamo_config:
            request["dynamo_config"] = config_of(self.dynamo_config)
        if self.perf is not None:
            request["perf"] = dict(self.perf)
        return request


@dataclass
class ProbeBatchResult:
    """What came back from one probe process: the environment and one raw result per job."""

    environment: dict[str, object]
    results: dict[str, dict[str, object]]  # job id -> raw probe result
    failed: dict[str, str] = field(default_factory=dict)  # job id -> why no result came back
    import_s: float | None = None
    wall_s: float | None = None


@dataclass(frozen=True)
class ProbeScheduling:
    """How the probe spreads its runs over the target's cores (results do not depend on it)."""

    parallel_runs: int | None = None  # runs at once in one probe; None = the target's share of its cores
    targets_sharing: int = 1  # targets running at the same time, dividing the cores between them
    serial_timings: bool = False  # one run at a time, so compile and steady-state times are not under load


ProgressFn = Callable[[str], None]


def host_key(host: str) -> str:
    """A host address as a label holds it: without a user name ('ssh://me@gpu-a' -> 'ssh://gpu-a')."""
    scheme, sep, rest = host.partition("://")
    where, at, after = rest.partition("/")
    where = where.rpartition("@")[2]
    return f"{scheme}{sep}{where}{at}{after}" if sep else host.rpartition("@")[2]


class ScriptEntry(enum.Enum):
    """Every way casekit runs someone else's scripts. Each opens its runner's session naming its entry
    (`Runner.open_session`); the attack battery (tests/security/test_entry_points.py) runs every attack
    through every entry, and a test fails when an entry has no driver there: a new way to run scripts
    adds a member here and joins the battery before it lands."""

    CAPTURE = "capture"  # casekit capture: the pre- and post-fix scripts, eager, compiled, fullgraph=True
    PERF = "perf"  # replay/capture/bisect --perf: fresh processes timed, each job's compile cache its own
    REPLAY = "replay"  # casekit replay: the archive's batch, then its rollback check in the same probe
    BISECT_RELEASES = "bisect"  # casekit bisect: the case replayed on each release probed
    BISECT_COMMITS = "bisect-commits"  # casekit bisect-commits: the user's script in each commit's tree
    REDUCE = "reduce"  # casekit reduce: the candidates, one warm probe; and the check on a second release
    REDUCE_CONFIRM = "reduce-confirm"  # casekit reduce: the result confirmed in a fresh probe


class ProbeSession(abc.ABC):
    """Where a caller's batches run: opened from a prepared runner (`Runner.open_session`), closed when
    the caller is done. `warm`: one probe (one torch import) serves every batch; else each batch pays its
    own. A session owns its probe and its sandbox: nothing outside runners/ assembles either."""

    warm: ClassVar[bool] = False
    supports_turns: ClassVar[bool] = False  # runs a job's `turns` (casekit.runners.turns)

    def __init__(self, entry: ScriptEntry | None) -> None:
        self.entry = entry
        self.imports = 0  # how many times torch was imported (1 for a whole healthy warm session)
        self.import_s: float | None = None
        # installed modules a warm probe imports once, before forking runs (a reducer's candidates all import
        # the same library); a session without a warm probe has nothing to import them into
        self.preload: list[str] = []

    @abc.abstractmethod
    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """Run one batch; what came back (a job without a result says why in `failed`)."""

    def start(self, progress: ProgressFn) -> None:  # noqa: B027 - a session without a warm probe starts none
        """Start the session's warm probe now, in the caller's thread, if it is not running (a caller that then
        runs batches from threads of its own: a sandboxed probe dies with the thread that started it)."""

    def close(self) -> None:  # noqa: B027 - a session that keeps nothing running has nothing to end
        """End whatever the session keeps running and remove its folders."""

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BatchSession(ProbeSession):
    """A session whose every batch is its runner's own (`Runner.run_probe`: a container per batch)."""

    def __init__(self, runner: Runner, entry: ScriptEntry | None) -> None:
        super().__init__(entry)
        self.runner = runner

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        batch = self.runner.run_probe(jobs, progress)
        self.imports += 1
        self.import_s = batch.import_s
        return batch


class Runner(abc.ABC):
    """Provides one target and runs the probe inside it.

    The class attributes and class methods are the runner's facts, asked
    through `casekit.runners.registry` before any runner exists; the defaults
    describe a runner that provides a requested torch version as it is (no
    build, no pins, no `--allow` keys).
    """

    name: ClassVar[str]
    builds_envs: ClassVar[bool] = False  # prepare() builds something on disk (a venv, an image): worth doing ahead
    versions: ClassVar[VersionSource] = VersionSource.INDEX
    pins_libraries: ClassVar[bool] = False  # installs the library versions cases recorded beside torch
    runs_images: ClassVar[bool] = False  # an explicit image (--image) is a target of this runner
    sandbox_name: ClassVar[str] = ""  # what isolates the scripts, as --allow's help names it ("bubblewrap")
    allow_options: ClassVar[frozenset[str]] = frozenset()  # every key its spec.options may hold
    allow_examples: ClassVar[tuple[str, ...]] = ()  # the keys --allow's help shows, as KEY=EXAMPLE
    channels: ClassVar[frozenset[Channel]] = frozenset({Channel.RELEASE})  # the channels `torch` may be asked in

    def __init__(self, spec: TargetSpec) -> None:
        self.check_options(spec.options)
        self.spec = spec
        # one run at a time unless the caller asks (replay and bisect do): a capture's timings stay its reference
        self.scheduling = ProbeScheduling(parallel_runs=1)

    @abc.abstractmethod
    def prepare(self, progress: ProgressFn) -> None:
        """Make the environment ready (build a venv, an image); idempotent and cached."""

    @abc.abstractmethod
    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """Run the probe once (one torch import) over all jobs; raise RunnerError if it cannot start.
        Callers outside runners/ go through a session (`open_session`)."""

    def open_session(
        self,
        entry: ScriptEntry,
        *,
        scheduling: ProbeScheduling | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ProbeSession:
        """After prepare(): the session `entry`'s batches run in. `scheduling`: runs at once in one batch
        (default: the runner's); `env`: variables the probe gets beside the sandbox's own (a warm session's).
        This default gives each batch its own probe (`run_probe`); a runner whose probe runs on this host
        keeps one warm (runners.warm)."""
        return BatchSession(self, entry)

    def describe(self) -> dict[str, object]:
        """Runner facts for the environment record (image id, venv path...)."""
        return {
            "runner": self.name,
            "label": self.label_of(self.spec) + variant_suffix(self.spec.dynamo, self.spec.packages),
        }

    # ------------------------------------------------------------ facts, asked before a runner exists

    @classmethod
    def target(cls, **fields: Any) -> TargetSpec:
        """A spec for this runner, with the host it would run on (see `host`)."""
        return TargetSpec(runner=cls.name, host=cls.host(), **fields)

    @classmethod
    def host(cls) -> str | None:
        """Where this runner's targets run when that is not this machine (None: here)."""
        return None

    @classmethod
    def label_of(cls, spec: TargetSpec) -> str:
        """A short, stable key: 'venv:torch-2.13.0-cu124'; '@host' when the target runs elsewhere."""
        parts = [f"torch-{describe(spec.channel, spec.torch)}", *(part for part in (spec.cuda, spec.image) if part)]
        return f"{spec.runner}:" + "-".join(parts) + (f"@{host_key(spec.host)}" if spec.host else "")

    @classmethod
    def as_built(cls, spec: TargetSpec, torch_seen: object) -> TargetSpec:
        """The spec naming the exact build that ran (`torch_seen`, what the probe reported: '2.13.0+cpu'),
        so that `--torch 2.13` and `--torch 2.13.0` give one label when they are one build. An image the
        user named is its own build, and a runner of interpreters names no version: both stay as asked."""
        if cls.versions is not VersionSource.INDEX or spec.image is not None or not isinstance(torch_seen, str):
            return spec
        try:
            public = Version(torch_seen).public
        except InvalidVersion:
            return spec  # a probe that could not say: the request is all there is
        return replace(spec, torch=public)

    @classmethod
    def display_of(cls, spec: TargetSpec) -> str:
        """The target for people (progress lines, notices); the label unless the runner says more briefly."""
        return cls.label_of(spec)

    @classmethod
    def replay_flags(cls, spec: TargetSpec, *, say_runner: bool = True) -> list[str]:
        """The `casekit replay` flags that select this target again (a bisection's "reproduce with");
        `say_runner` False leaves out `--runner NAME` (for the runner `--torch` gets by default)."""
        flags = [
            "--torch",
            format_torch_request(spec.channel, spec.torch),
            *(["--runner", spec.runner] if say_runner else []),
        ]
        flags += ["--cuda", spec.cuda] if spec.cuda else []
        return flags + (["--index-url", spec.index_url] if spec.index_url else []) + variant_flags(spec)

    @classmethod
    def nightlies_between(cls, spec: TargetSpec, good: dt.date, bad: dt.date) -> tuple[list[str], list[str]]:
        """The nightly builds from `good` to `bad` this runner would provide for `spec` (exact versions,
        oldest first, one per date) and what was done to find them; only for runners with the nightly channel."""
        raise RunnerError(f"--runner {cls.name} cannot provide nightly builds of torch")

    @classmethod
    def free_build_bytes(cls) -> int | None:
        """Free bytes where this runner's builds land (checked before building ahead); None: cannot tell."""
        return None

    @classmethod
    def check_options(cls, options: Sequence[tuple[str, str]]) -> None:
        """RunnerError naming every key this runner does not know (the --allow keys are its own)."""
        unknown = sorted({key for key, _ in options} - cls.allow_options)
        if unknown:
            known = ", ".join(sorted(cls.allow_options)) or "none"
            raise RunnerError(f"unknown {cls.name} option(s): {', '.join(unknown)} (known: {known})")


# What makes the runner of a target: the registry's `make_runner`, or a fake in tests.
RunnerFactory = Callable[[TargetSpec], Runner]


def allow_options(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`--allow KEY=VALUE` (repeatable) as a target's options, in the order given; which keys a runner
    takes is the runner's to check (the sandbox's for python and venv, the container's for docker)."""
    options = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RunnerError(f"--allow takes KEY=VALUE, not {item!r}")
        options.append((key, value))
    return tuple(options)


def variant_flags(spec: TargetSpec) -> list[str]:
    """The flags that give a target its own Dynamo settings and pins again (a bisection's "reproduce with")."""
    flags = [flag for name, value in spec.dynamo for flag in ("--dynamo", f"{name}={value}")]
    return flags + [flag for pin in spec.packages for flag in ("--package", pin)]
