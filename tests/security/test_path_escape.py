"""A bundle's script name never chooses a host path: not through validate, replay, bisect or a crafted Case."""

from __future__ import annotations

from pathlib import Path

import pytest

from casekit.bundle import case_to_toml, parse_case
from casekit.errors import BundleError, ScriptNameError
from casekit.includes import check_script_name
from casekit.replay.run import _write_scripts

from ..conftest import run_casekit
from ..test_bundle import make_case

HOSTILE_NAMES = [
    "../../../x",
    "../x.py",
    "/tmp/abs.py",
    "~/.bashrc",
    "a/b.py",
    "a\\b.py",
    ".bashrc",
    "..",
    ".",
    "",
    "x\x00.py",
    "x\n.py",
    "x" * 200 + ".py",
    "-rf.py",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_script_names_are_refused_at_load(name: str):
    text = case_to_toml(make_case()).replace('name = "repro.py"', f"name = {name!r}".replace("'", '"'))
    if name in ("x\x00.py", "x\n.py", "a\\b.py"):  # not expressible by naive quoting: build the TOML properly
        import tomllib

        import tomli_w

        data = tomllib.loads(case_to_toml(make_case()))
        data["scripts"]["pre"]["name"] = name
        text = tomli_w.dumps(data, multiline_strings=True)
    with pytest.raises(BundleError) as error:
        parse_case(text, "cases/demo.toml")
    assert "field 'scripts.pre.name'" in str(error.value)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_replay_never_writes_a_name_it_did_not_check(tmp_path: Path, name: str):
    case = make_case()
    case.pre.name = name  # a Case built in memory, bypassing the loader: the writer checks again
    batch = tmp_path / "batch"
    batch.mkdir()
    with pytest.raises(ScriptNameError):
        _write_scripts([case], batch)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["batch"]


def test_ordinary_names_pass():
    for name in ("repro.py", "repro_v2.py", "model-fix+1.py", "_a.py"):
        assert check_script_name(name) == name


def test_validate_and_replay_refuse_an_escaping_bundle_and_write_nothing(tmp_path: Path):
    archive = tmp_path / "cases"
    archive.mkdir()
    victim = tmp_path / "victim.txt"
    text = case_to_toml(make_case()).replace('name = "repro.py"', f'name = "../../{victim.name}"')
    (archive / "demo.toml").write_text(text)
    validate = run_casekit("validate", "--archive", str(archive), cwd=tmp_path)
    assert validate.returncode != 0
    assert "scripts.pre.name" in validate.stdout + validate.stderr
    replay = run_casekit("replay", "--archive", str(archive), "--no-record", cwd=tmp_path, timeout=120)
    assert replay.returncode != 0
    assert "Traceback" not in replay.stderr
    assert not victim.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases"]
