"""Bisection fakes shared by the bisect tests: a one-break case and `run_target` at its interface.

`FakeReplay` returns one canned observation set per torch version and classifies it for real, so
the release bisection runs in milliseconds; the real torch runs are in test_bisect_releases.py.
"""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from casekit.bundle import sha256_text
from casekit.classify import classify_case
from casekit.cli.bisect import register
from casekit.model import Case, ScriptObservation, ScriptSource, ScriptStatus, Site
from casekit.replay.run import ReplayOptions, TargetRun
from casekit.runners.interface import ProgressFn, RunnerFactory, TargetSpec
from casekit.runners.registry import label

PRE = "import torch\n\n\ndef f(x):\n    n = x.sum().item()\n    return x * n\n\n\nprint(torch.compile(f)(torch.ones(2)))\n"
POST = "import torch\n\n\ndef f(x):\n    return x * x.sum()\n\n\nprint(torch.compile(f)(torch.ones(2)))\n"
ITEM = "legacy:tensor.item"  # any stable category: classification compares categories


def item_break(line: int = 5, reason: str = "Tensor.item") -> Site:
    return Site("repro.py", line, "f", "    n = x.sum().item()", ITEM, reason)


def observed(
    *sites: Site, status: ScriptStatus = ScriptStatus.OK, graphs: int = 2, detail: str = ""
) -> ScriptObservation:
    return ScriptObservation(status=status, graphs=graphs, sites=list(sites), detail=detail)


def make_case() -> Case:
    """Captured with one `.item()` break in the pre-fix and a post-fix that compiles to one graph."""
    return Case(
        id="item-case",
        title="item breaks",
        pre=ScriptSource("repro.py", sha256_text(PRE), PRE),
        post=ScriptSource("fixed.py", sha256_text(POST), POST),
        observations={"pre": observed(item_break()), "post": observed(graphs=1)},
    )


HISTORY: dict[str, dict[str, ScriptObservation]] = {
    # the break persists (reworded from 2.7 on) ...
    "2.5.1": {"pre": observed(item_break()), "post": observed(graphs=1)},
    "2.6.0": {"pre": observed(item_break()), "post": observed(graphs=1)},
    "2.7.1": {"pre": observed(item_break(reason="Unsupported Tensor.item() call")), "post": observed(graphs=1)},
    # ... then moves one line down, and the post-fix starts to crash
    "2.8.0": {
        "pre": observed(item_break(line=6)),
        "post": observed(status=ScriptStatus.COMPILE_ERROR, graphs=0, detail="compiled run: RuntimeError: boom"),
    },
    "2.9.1": {
        "pre": observed(item_break(line=6)),
        "post": observed(status=ScriptStatus.COMPILE_ERROR, graphs=0, detail="compiled run: RuntimeError: boom"),
    },
    "2.10.0": {
        "pre": observed(item_break(line=6)),
        "post": observed(status=ScriptStatus.COMPILE_ERROR, graphs=0, detail="compiled run: RuntimeError: boom"),
    },
}
VERSIONS = list(HISTORY)


class FakeReplay:
    """`run_target` at its interface: canned observations per torch version, classified for real."""

    def __init__(self, history: dict[str, dict[str, ScriptObservation]], broken: frozenset[str] = frozenset()) -> None:
        self.history = history
        self.broken = broken
        self.specs: list[TargetSpec] = []

    def __call__(
        self,
        spec: TargetSpec,
        cases: list[Case],
        options: ReplayOptions,
        make_runner: RunnerFactory,
        progress: ProgressFn,
    ) -> TargetRun:
        assert options.record is False and options.verify_rollback is False
        self.specs.append(spec)
        version = spec.torch or "?"
        run = TargetRun(spec=spec, label=label(spec), environment={"torch": version})
        if version in self.broken:
            run.error = f"cannot install torch {version}"
            return run
        run.results = [classify_case(case, label(spec), self.history[version]) for case in cases]
        return run

    @property
    def versions(self) -> list[str]:
        return [spec.torch or "?" for spec in self.specs]


def no_runner(spec: TargetSpec):  # type: ignore[no-untyped-def]
    raise AssertionError("the fake replay never asks for a runner")


def make_app() -> typer.Typer:
    """A scratch app with just the bisect commands, registered the way casekit.cli does."""
    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)
    return app


def invoke(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(make_app(), [str(a) for a in args])
    return result.exit_code, result.output, result.exception
