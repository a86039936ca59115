"""A bundle's recorded packages become an installer's arguments: only plain name==version pins get there."""

from __future__ import annotations

from dataclasses import replace

import pytest
from packaging.requirements import Requirement

from casekit.bundle import load_case
from casekit.replay.run import case_pins
from casekit.versions import package_pin

from ..conftest import ROOT

HOSTILE = {
    "evil @ file:///etc/passwd": "1.0",  # a URL requirement: any file or server becomes the package
    "transformers": "5.24.0 ; python_version > '0'",  # a marker
    "--index-url=http://127.0.0.1:9/simple": "1",  # an option
    "numpy*": "1",  # a glob for the Dockerfile's unquoted shell word
    "ok-name": "not a version",
}


def test_only_plain_pins_reach_the_installer() -> None:
    case = load_case(ROOT / "cases" / "item-branch.toml")
    case = replace(case, environment={**case.environment, "packages": {**HOSTILE, "transformers-x": "5.24.0"}})
    pins, warnings = case_pins([case])
    assert pins == ("transformers-x==5.24.0",)
    assert len(warnings) == len(HOSTILE) and all("not a name==version pin" in w for w in warnings)


@pytest.mark.parametrize(("dist", "version"), sorted(HOSTILE.items()))
def test_control_each_refused_pin_would_have_been_more_than_a_version(dist: str, version: str) -> None:
    assert package_pin(dist, version) is None
    text = f"{dist}=={version}"
    try:
        requirement = Requirement(text)
    except Exception:  # noqa: BLE001 - not even a requirement: an installer would read it as an option or fail
        return
    assert requirement.url or requirement.marker or str(requirement.specifier) != f"=={version}"
