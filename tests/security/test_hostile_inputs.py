"""Hostile input through the real CLI: one `casekit: error:` line (or one line per invalid bundle), never
a traceback, and nothing lost.

Hostile bundles (TOML nested 600 deep, bad base64, includes that cannot lay out), forged results
files, `--id ''`, and a disk that fills up under `replay --record` and `capture`. Each test of a
defence has a control beside it showing the input does the damage when the check is not there.
"""

from __future__ import annotations

import base64
import binascii
import copy
import errno
import hashlib
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import tomli_w

import casekit.includes as includes_module
import casekit.replay.document as replay_document_module
from casekit.bundle import parse_case, slugify
from casekit.errors import BundleError
from casekit.model import ScriptRole, ScriptStatus
from casekit.replay.document import ReplayDocumentError, parse_replay_document, read_replay_document, replay_schema
from casekit.report.text import replay_document_text

from ..conftest import FIXTURES, ROOT, STARTER, run_casekit

BUNDLE = ROOT / "cases" / "item-branch.toml"  # a real captured case: pre repro.py, post fixed.py
RESULTS = FIXTURES / "report" / "replay-torch-2.5.1.json"  # a real `replay --json`
REPORT_ARCHIVE = FIXTURES / "report" / "archive"


# ------------------------------------------------------------------ hostile bundles


def included(path: str, text: str) -> dict[str, str]:
    return {"path": path, "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}


def with_includes(*files: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["includes"] = list(files)

    return edit


def bad_base64(data: dict[str, Any]) -> None:
    data["includes"] = [{"path": "weights.bin", "sha256": "0" * 64, "base64": "abcde"}]


def nested_600_deep(data: dict[str, Any]) -> None:
    pass  # written as text below: tomli_w would refuse to write it


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "deep": (nested_600_deep, "not valid TOML: nested too deeply"),
    "bad-base64": (bad_base64, "field 'includes': included file weights.bin: 'base64' is not base64"),
    "file-and-folder": (
        with_includes(included("util", "a file\n"), included("util/mod.py", "X = 1\n")),
        "included file util is also the folder of included file util/mod.py",
    ),
    "replaces-script": (
        with_includes(included("repro.py", "print('improved')\n")),
        "included file repro.py is named like the script repro.py",
    ),
    "case-clash": (
        with_includes(included("Helper.py", "A = 1\n"), included("helper.py", "A = 2\n")),
        "included files Helper.py and helper.py differ only in case",
    ),
}


def hostile_bundle(case_id: str) -> str:
    data = tomllib.loads(BUNDLE.read_text())
    data["id"] = case_id
    edit, _ = HOSTILE[case_id]
    edit(data)
    text = tomli_w.dumps(data, multiline_strings=True)
    if case_id == "deep":
        text = text.replace('backend = "eager"\n', 'backend = "eager"\nextra = ' + "[" * 600 + "]" * 600 + "\n", 1)
    return text


@pytest.fixture
def hostile_archive(tmp_path: Path) -> Path:
    """cases/ with the real item-branch bundle and every hostile bundle beside it."""
    archive = tmp_path / "cases"
    archive.mkdir()
    (archive / BUNDLE.name).write_bytes(BUNDLE.read_bytes())
    for case_id in HOSTILE:
        (archive / f"{case_id}.toml").write_text(hostile_bundle(case_id))
    return archive


@pytest.mark.parametrize("case_id", HOSTILE)
def test_a_hostile_bundle_is_one_bundle_error_naming_the_field(case_id: str) -> None:
    with pytest.raises(BundleError) as caught:
        parse_case(hostile_bundle(case_id), f"cases/{case_id}.toml")
    line = str(caught.value)
    assert line.startswith(f"cases/{case_id}.toml: ") and HOSTILE[case_id][1] in line and "\n" not in line


def naive_lay_out(folder: Path, files: list[dict[str, str]], script: str) -> None:
    """How the scripts and includes were laid out before the checks: the script, then each file by its path."""
    folder.mkdir()
    (folder / "repro.py").write_text(script)
    for file in files:
        target = folder.joinpath(*PurePosixPath(file["path"]).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file["text"].encode())


def test_control_the_hostile_bundles_do_their_damage_without_the_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RecursionError):
        tomllib.loads(hostile_bundle("deep"))  # the parser alone: a traceback
    with pytest.raises(binascii.Error):
        base64.b64decode("abcde")  # the decoder alone: a traceback
    monkeypatch.setattr(includes_module, "check_layout", lambda *args, **kwargs: None)  # the layout checks off
    for case_id in ("file-and-folder", "replaces-script", "case-clash"):
        parse_case(hostile_bundle(case_id), f"{case_id}.toml")  # the loader would accept them
    data = tomllib.loads(hostile_bundle("file-and-folder"))
    with pytest.raises((FileExistsError, NotADirectoryError)):  # and the lay-out kills the whole replay
        naive_lay_out(tmp_path / "a", data["includes"], "print('repro')\n")
    naive_lay_out(tmp_path / "b", tomllib.loads(hostile_bundle("replaces-script"))["includes"], "print('repro')\n")
    assert (tmp_path / "b" / "repro.py").read_text() == "print('improved')\n"  # other code runs: a forged verdict


def test_lay_out_never_replaces_the_script_even_for_a_case_built_in_memory(tmp_path: Path) -> None:
    from casekit.includes import IncludeError, lay_out
    from casekit.model import IncludedFile

    (tmp_path / "repro.py").write_text("print('repro')\n")
    forged = IncludedFile(**included("repro.py", "print('improved')\n"))
    with pytest.raises(IncludeError, match="would replace a file beside the script"):
        lay_out(tmp_path, [forged])
    assert (tmp_path / "repro.py").read_text() == "print('repro')\n"


def one_line_each(done: subprocess.CompletedProcess[str], ids: list[str]) -> None:
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "RecursionError" not in out and "FileExistsError" not in out
    for case_id in ids:
        [line] = [line for line in out.splitlines() if f"{case_id}.toml" in line]
        assert HOSTILE[case_id][1] in line, line


def test_every_reader_names_each_hostile_bundle_in_one_line(hostile_archive: Path, tmp_path: Path) -> None:
    ids = list(HOSTILE)
    validate = run_casekit("validate", "--archive", str(hostile_archive), timeout=120)
    assert validate.returncode == 1 and f"ok      {hostile_archive}/item-branch.toml" in validate.stdout
    one_line_each(validate, ids)
    listed = run_casekit("list", "--archive", str(hostile_archive), timeout=120)
    assert listed.returncode == 2 and listed.stdout.count("item-branch") == 1  # the valid case is still listed
    one_line_each(listed, ids)
    reported = run_casekit("report", "-f", "md", "--archive", str(hostile_archive), "--out", str(tmp_path / "r"))
    assert reported.returncode == 2 and "item-branch" in (tmp_path / "r" / "report.md").read_text()
    one_line_each(reported, ids)
    for command in ("show", "log"):
        for case_id in ids:
            done = run_casekit(command, case_id, "--archive", str(hostile_archive), timeout=120)
            assert done.returncode == 2, (command, case_id, done.stdout, done.stderr)
            [line] = done.stderr.strip().splitlines()
            assert line.startswith("casekit: error: ") and HOSTILE[case_id][1] in line, (command, line)
    assert (hostile_archive / BUNDLE.name).read_bytes() == BUNDLE.read_bytes()


@pytest.mark.slow
def test_replay_goes_on_past_every_hostile_bundle(hostile_archive: Path, tmp_path: Path) -> None:
    """One torch run: the valid case replays, each hostile bundle is named, nothing dies at lay-out."""
    out = tmp_path / "replay.json"
    done = run_casekit("replay", "--archive", str(hostile_archive), "--json", str(out), timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    one_line_each(done, list(HOSTILE))
    assert "casekit: error: 5 invalid bundle(s) were not replayed" in done.stderr
    [result] = read_replay_document(out).results
    assert result.case == "item-branch" and result.scripts[ScriptRole.PRE].status is ScriptStatus.OK


# ------------------------------------------------------------------ forged results files


def without(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        holder = data
        for key in path[:-1]:
            holder = holder[key]
        del holder[path[-1]]

    return edit


def no_side(data: dict[str, Any]) -> None:
    site = data["results"][0]["scripts"]["pre"]["sites"][0]
    site.update({"class": "new", "observed": None, "recorded": None})


def half_rollback(data: dict[str, Any]) -> None:
    data["results"][0]["rollback"] = {"needed": True}


def wrong_type(data: dict[str, Any]) -> None:
    data["results"][0]["scripts"]["pre"]["sites"] = 7


def nested_960_deep(data: dict[str, Any]) -> None:
    data["results"][0]["extra"] = DEEP  # replaced by 960 nested lists in the text (json.dumps would overflow here)


DEEP = "nested 960 deep"
FORGED: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "a result without scripts": (without(("results", 0, "scripts")), "results[0]", "'scripts' is a required"),
    "a script without sites": (
        without(("results", 0, "scripts", "pre", "sites")), "results[0].scripts.pre", "'sites' is a required"
    ),
    "a site neither observed nor recorded": (no_side, "results[0].scripts.pre.sites[0]", "neither observed nor"),
    "a rollback without its fields": (half_rollback, "results[0].rollback", "is not valid under any"),
    "sites that are a number": (wrong_type, "results[0].scripts.pre.sites", "7 is not of type 'array'"),
    "960 levels deep": (nested_960_deep, "results[0].extra", "nested deeper than 64 levels"),
}  # fmt: skip


def forged_text(name: str) -> str:
    data = json.loads(RESULTS.read_text())
    data["results"][0]["severity"] = "warn"  # a result the text view details, field by field
    FORGED[name][0](data)
    return json.dumps(data).replace(json.dumps(DEEP), "[" * 960 + "]" * 960)


def forged(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(forged_text(name))
    return data


@pytest.mark.parametrize("name", FORGED)
def test_a_forged_results_file_is_one_line_naming_the_file_and_the_field(name: str, tmp_path: Path) -> None:
    path = tmp_path / "forged.json"
    path.write_text(forged_text(name))
    _, field, words = FORGED[name]
    merged = run_casekit("merge", str(path), "--json", str(tmp_path / "merged.json"), timeout=120)
    reported = run_casekit(
        "report", "--archive", str(REPORT_ARCHIVE), "--results", str(path), "--out", "-", "-f", "md", timeout=120
    )
    for done in (merged, reported):
        assert done.returncode == 2 and "Traceback" not in done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"casekit: error: {path}: field '{field}'") and words in line, line
    assert not (tmp_path / "merged.json").exists()


def lenient_schema() -> dict[str, Any]:
    """The schema as it was: a result needed only case, target, verdict, severity; nothing else was required."""
    schema = copy.deepcopy(replay_schema())
    defs = schema["$defs"]
    defs["result"]["required"] = ["case", "target", "verdict", "severity"]
    defs["script"]["required"] = ["status"]
    defs["site"]["required"] = ["class"]
    defs["rollback"]["required"] = ["needed"]
    del defs["side"]["required"]
    return schema


NEWLY_REFUSED = [name for name in FORGED if name not in ("sites that are a number", "960 levels deep")]


@pytest.mark.parametrize("name", NEWLY_REFUSED)
def test_control_the_forged_files_passed_the_old_checks_and_crash_the_readers(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ReplayDocumentError):
        parse_replay_document(forged(name), "forged.json")
    monkeypatch.setattr(replay_document_module, "replay_schema", lenient_schema)
    monkeypatch.setattr(replay_document_module, "_check_sites", lambda document, origin: None)
    with pytest.raises((KeyError, AssertionError)):  # the typed reader, or merge's text view, dies on it
        document = parse_replay_document(forged(name), "forged.json")  # the old checks accepted it
        replay_document_text(document, verbose=True)


def test_control_a_wrong_type_crashes_the_reader_without_the_schema() -> None:
    data: Any = forged("sites that are a number")
    with pytest.raises(TypeError):  # what the schema check (already there) stands in front of
        replay_document_module._typed(data, "forged.json")


OLD_READER_ON_DEEP = """
import json, sys
sys.path.insert(0, sys.argv[2])
import jsonschema
from casekit.replay.document import replay_schema
data = json.loads(open(sys.argv[1]).read())  # the parser takes 960 levels
jsonschema.Draft202012Validator(replay_schema()).validate(data)  # the schema never looks below "extra"
def deeper(n):
    return json.dumps(data) if n == 0 else deeper(n - 1)
try:
    deeper(60)  # merge writes it back from a few frames down
except RecursionError:
    print("RecursionError")
"""


def test_control_a_960_deep_document_passes_the_schema_and_overflows_json_dumps(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(forged_text("960 levels deep"))
    done = subprocess.run(
        [sys.executable, "-c", OLD_READER_ON_DEEP, str(path), str(ROOT)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "RecursionError", done.stderr


# ------------------------------------------------------------------ --id ''


def test_an_empty_id_is_refused_before_anything_runs(tmp_path: Path) -> None:
    script = STARTER / "item-branch" / "repro.py"
    assert ("" or slugify(script.stem)) == "repro"  # control: '' is falsy, the old check took the default id
    done = run_casekit("capture", str(script), "--id", "", "--archive", str(tmp_path / "cases"), timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("casekit: error: invalid case id ''")
    assert not (tmp_path / "cases").exists()


# ------------------------------------------------------------------ a full disk


def mount_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A small tmpfs at `folder` (we are root in CI), unmounted after; a skip only where mounting is not permitted."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.decode(errors='replace').strip()[:160]}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(disk: Path) -> None:
    """Write until the file system says ENOSPC."""
    with open(disk / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs holding cases/item-branch.toml (and a spare copy for the control), then filled up."""
    for disk in mount_tmpfs(tmp_path / "disk", "1m"):
        (disk / "cases").mkdir()
        (disk / "cases" / BUNDLE.name).write_bytes(BUNDLE.read_bytes())
        (disk / "spare.toml").write_bytes(BUNDLE.read_bytes())
        fill(disk)
        yield disk


def assert_bundle_intact(disk: Path) -> None:
    assert (disk / "cases" / BUNDLE.name).read_bytes() == BUNDLE.read_bytes()
    assert sorted(p.name for p in (disk / "cases").iterdir() if p.name.endswith(".tmp")) == []  # no temp left


def test_control_a_plain_write_on_a_full_disk_destroys_the_bundle(full_disk: Path) -> None:
    spare = full_disk / "spare.toml"
    with pytest.raises(OSError) as caught, open(spare, "w") as handle:  # open, truncate, write: the naive save
        handle.write(BUNDLE.read_text() + "#" * 200_000)
    assert caught.value.errno == errno.ENOSPC
    assert spare.read_bytes() != BUNDLE.read_bytes()  # the bundle is gone (or half-written)


@pytest.mark.slow
@pytest.mark.parametrize("json_on", ["another file system", "the full disk"])
def test_a_full_disk_during_replay_record_keeps_the_bundle_and_shows_the_results(
    full_disk: Path, tmp_path: Path, json_on: str
) -> None:
    out = (tmp_path / "out" if json_on == "another file system" else full_disk) / "replay.json"
    archive = full_disk / "cases"
    done = run_casekit("-q", "replay", "--archive", str(archive), "--record", "--json", str(out), timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("casekit: error: could not record the replay of ") and "No space left on device" in line
    assert "item-branch" in done.stdout  # the table is shown
    assert_bundle_intact(full_disk)
    if json_on == "another file system":
        assert read_replay_document(out).results[0].case == "item-branch"
    else:
        assert f"--json {out}: cannot write: No space left on device" in line and not out.exists()


@pytest.mark.slow
def test_a_full_disk_during_capture_is_one_line_and_keeps_the_old_bundle(full_disk: Path) -> None:
    archive = full_disk / "cases"
    script = STARTER / "item-branch" / "repro.py"
    done = run_casekit(
        "-q", "capture", str(script), "--id", "item-branch", "--force", "--no-fullgraph", "--archive", str(archive),
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (
        f"casekit: error: cannot write {archive.resolve()}/item-branch.toml: No space left on device "
        "(the file is as it was)"
    )
    assert_bundle_intact(full_disk)
