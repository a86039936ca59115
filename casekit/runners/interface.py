"""The runner interface: what provides a target environment and runs the probe in it.

A runner turns a `TargetSpec` into a ready environment (`prepare`), then runs
the probe there on a batch of scripts (`run_probe`). Implementations:
`python` (an existing interpreter), `venv` (managed, cached), `docker`
(an image, sandboxed). Adding one is one new file plus a line in `registry`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from casekit.errors import RunnerError
from casekit.model import IncludedFile

PROBE_PATH = Path(__file__).resolve().parent.parent / "probe.py"


@dataclass(frozen=True)
class TargetSpec:
    """One (python, torch, CUDA) combination and how it is provided."""

    runner: str  # "python" | "venv" | "docker"
    torch: str | None = None  # requested version ("2.13", "2.5.1"); None = whatever the interpreter has
    python: str | None = None  # interpreter path (python runner) or version ("3.11") for managed targets
    cuda: str | None = None  # CUDA tag, e.g. "cu124"; None = CPU / the index default
    index_url: str | None = None
    find_links: str | None = None
    image: str | None = None  # docker: an explicit image to use
    extra_packages: tuple[str, ...] = ()  # "name==version" pins installed beside torch
    options: tuple[tuple[str, str], ...] = ()  # runner-specific relaxations (docker sandbox flags)

    @property
    def label(self) -> str:
        """A short, stable, human label: 'venv:torch-2.13.0+cu124', 'python:/usr/bin/python3'."""
        if self.runner == "python":
            return f"python:{self.python or 'current'}"
        parts = [f"torch-{self.torch or 'latest'}"]
        if self.cuda:
            parts.append(self.cuda)
        if self.image:
            parts.append(self.image)
        return f"{self.runner}:" + "-".join(parts)


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

    def to_request(self, script_path: str) -> dict[str, object]:
        return {
            "id": self.id,
            "script": script_path,
            "modes": list(self.modes),
            "backend": self.backend,
            "timeout": self.timeout,
            "seed": self.seed,
            "allow_network": self.allow_network,
            "argv": list(self.argv),
        }


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


class Runner(abc.ABC):
    """Provides one target and runs the probe inside it."""

    name: str

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        # one run at a time unless the caller asks (replay and bisect do): a capture's timings stay its reference
        self.scheduling = ProbeScheduling(parallel_runs=1)

    @abc.abstractmethod
    def prepare(self, progress: ProgressFn) -> None:
        """Make the environment ready (build a venv, an image); idempotent and cached."""

    @abc.abstractmethod
    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """Run the probe once (one torch import) over all jobs; raise RunnerError if it cannot start."""

    def describe(self) -> dict[str, object]:
        """Runner facts for the environment record (image id, venv path...)."""
        return {"runner": self.name, "label": self.spec.label}


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
