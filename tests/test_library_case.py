"""A graph break inside a library: a tiny, randomly initialised transformers BigBird (no download).

Captured for real with the python runner: the site is named relative to the
library's package root, the script line that called the model is kept as its
call site, and the case records the transformers version. Replaying it on an
interpreter with another transformers version warns (a library upgrade must not
masquerade as a torch change), and managed targets pin the recorded version.

One capture (module fixture) serves every test: importing torch + transformers
and compiling the model costs ~20-30 s on these machines.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.capture import CaptureRequest, capture
from casekit.model import Case
from casekit.replay.run import ReplayOptions, case_pins, replay
from casekit.runners.interface import TargetSpec
from casekit.runners.registry import make_runner

from .conftest import ROOT

CASE_DIR = ROOT / "examples" / "library" / "hf-break"
LOCAL_WHEELS = Path("/opt/wheels")
quiet = lambda message: None  # noqa: E731

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None,
        reason="transformers is not installed (.ci/run and make setup install transformers==5.24.0)",
    ),
]


@pytest.fixture(scope="module")
def library_case(tmp_path_factory) -> tuple[Archive, Case]:
    archive = Archive(tmp_path_factory.mktemp("library-archive"))
    request = CaptureRequest(
        script=CASE_DIR / "repro.py",
        fixed=CASE_DIR / "fixed.py",
        case_id="hf-break",
        title="logger.warning inside BigBirdModel.forward",
    )
    case = capture(request, make_runner(TargetSpec(runner="python")), archive, quiet)
    return archive, case


def test_library_break_is_captured_with_library_site_call_site_and_version(library_case):
    import transformers

    _, case = library_case
    pre = case.observations["pre"]
    assert pre.status.value == "ok", pre.detail
    library_sites = [site for site in pre.sites if site.file.startswith("transformers/")]
    assert library_sites, [site.where() for site in pre.sites]
    for site in pre.sites:
        assert not os.path.isabs(site.file), site.file  # named relative to the package root, never site-packages
        # The compiled frame is the library's own forward, called from the script's top level
        # (`out = compiled_model(input_ids)`, repro.py:32): a line outside the trace, which 2.5.1 does
        # not print, so identity does not count it as a call site; the stack is all torch and the library.
        assert site.call_site is None, site.where()
        assert site.stack and all(f.file.startswith(("torch/", "transformers/")) for f in site.stack), site.stack
    logging_site = next(site for site in library_sites if site.gb_id == "GB0291")
    assert logging_site.file == "transformers/models/big_bird/modeling_big_bird.py"
    assert logging_site.function == "forward"
    assert logging_site.source.startswith("logger.warning(")
    assert logging_site.reason == "logging.Logger method not supported for non-export cases"  # not the wrapper line
    assert case.environment["packages"]["transformers"] == transformers.__version__
    assert "torch" not in case.environment["packages"]  # torch is recorded on its own
    post = case.observations["post"]
    assert post.status.value == "ok" and post.sites == [] and post.graphs == 1


def test_managed_targets_pin_the_recorded_transformers(library_case):
    _, case = library_case
    pins, warnings = case_pins([case])
    assert f"transformers=={case.environment['packages']['transformers']}" in pins
    assert not any(pin.startswith(("torch==", "numpy==")) for pin in pins)
    assert warnings == []


def test_python_target_with_another_transformers_warns(library_case):
    archive, case = library_case
    recorded = case.environment["packages"]["transformers"]
    case.environment["packages"]["transformers"] = "0.0.1"  # as if captured with another release
    archive.save(case)
    try:
        report = replay(
            [archive.load("hf-break")],
            [TargetSpec(runner="python")],
            ReplayOptions(record=False),
            archive,
            make_runner,
            quiet,
        )
    finally:
        case.environment["packages"]["transformers"] = recorded
        archive.save(case)
    (run,) = report.targets
    assert run.error is None
    warned = [w for w in run.warnings if "transformers" in w]
    assert warned, run.warnings
    assert "0.0.1" in warned[0] and recorded in warned[0]
    (result,) = run.results
    assert result.verdict == "unchanged", result.verdict  # same torch, same library code: every break persists


@pytest.mark.skipif(
    not any(LOCAL_WHEELS.glob("torch-2.13.0*.whl")), reason="no local torch 2.13.0 wheel in /opt/wheels"
)
def test_venv_target_installs_the_recorded_transformers(library_case):
    """A managed torch 2.13.0 env gets transformers at the recorded version and replays the case unchanged."""
    archive, case = library_case
    recorded = case.environment["packages"]["transformers"]
    started = time.monotonic()
    report = replay(
        [case],
        [TargetSpec(runner="venv", torch="2.13.0", find_links=str(LOCAL_WHEELS))],
        ReplayOptions(record=False),
        archive,
        make_runner,
        quiet,
    )
    (run,) = report.targets
    assert run.error is None, run.error
    assert f"transformers=={recorded}" in run.spec.extra_packages
    assert not [w for w in run.warnings if "transformers" in w], run.warnings  # the env has the recorded version
    (result,) = run.results
    observed = result.scripts["pre"].observation
    assert observed.packages.get("transformers") == recorded
    assert result.verdict == "unchanged", result.verdict
    print(f"venv replay with transformers pinned: {time.monotonic() - started:.1f} s")
