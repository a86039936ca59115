"""`capture --include DIR` over a folder someone else filled (a clone, a teammate's tarball).

A symlink or a hard link in it can be any file of the capturing machine (an SSH key, the
environment in /proc/self/environ); a sparse file can claim gigabytes; names can collide on the
replaying machine's file system. Each is refused with one line naming the file, before anything
runs and before the file is read; each test shows first that the attack is real (a naive copy of
the same folder does leak or collide).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import casekit.includes as includes_module
from casekit.includes import MAX_FILE_BYTES, IncludeError, collect_includes

from ..conftest import run_casekit

pytestmark = pytest.mark.process  # every test here starts processes, git or signals

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- not-a-real-key-but-secret"
REPRO = "import torch\n\nstep = torch.compile(lambda x: x.sin() + 1)\nprint(step(torch.ones(3)))\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """tmp_path/project/{repro.py, conf/settings.json} and a key outside it, tmp_path/home/.ssh/id_ed25519."""
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text(SECRET)
    folder = tmp_path / "project"
    (folder / "conf").mkdir(parents=True)
    (folder / "repro.py").write_text(REPRO)
    (folder / "conf" / "settings.json").write_text('{"scale": 2}')
    return folder


def key_of(project: Path) -> Path:
    return project.parent / "home" / ".ssh" / "id_ed25519"


def capture_with_include(project: Path, *include: str) -> subprocess.CompletedProcess[str]:
    """`casekit capture project/repro.py --include ...` from the folder above the project, as a user runs it."""
    args = [arg for item in include for arg in ("--include", f"project/{item}")]
    return run_casekit(
        "capture", "project/repro.py", *args, "--archive", "cases", cwd=project.parent, timeout=120
    )  # fmt: skip


def assert_refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2, stderr one `casekit: error:` line naming the problem, no traceback."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("casekit: error: ")
    for word in words:
        assert word in line, line


def assert_nothing_written(project: Path) -> None:
    archive = project.parent / "cases"
    assert not archive.exists() or not list(archive.glob("*.toml"))


def naive_copy(folder: Path, into: Path) -> dict[str, bytes]:
    """What a naive copy of the folder holds (shutil.copytree follows links): name -> bytes."""
    shutil.copytree(folder, into)
    return {p.relative_to(into).as_posix(): p.read_bytes() for p in sorted(into.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ links


def plant_symlink_to_key(project: Path) -> str:
    (project / "conf" / "deploy_key").symlink_to(key_of(project))
    return "conf/deploy_key"


def plant_symlink_to_environ(project: Path) -> str:
    (project / "conf" / "env.txt").symlink_to("/proc/self/environ")
    return "conf/env.txt"


def plant_hard_link_to_key(project: Path) -> str:
    os.link(key_of(project), project / "conf" / "notes.txt")
    return "conf/notes.txt"


def plant_symlink_to_key_folder(project: Path) -> str:
    (project / "conf" / "keys").symlink_to(key_of(project).parent, target_is_directory=True)
    return "conf/keys"


LINKS: dict[str, tuple[Callable[[Path], str], str]] = {
    "symlink to an SSH key": (plant_symlink_to_key, "is a symbolic link"),
    "symlink to /proc/self/environ": (plant_symlink_to_environ, "is a symbolic link"),
    "hard link to an SSH key": (plant_hard_link_to_key, "is a hard link"),
    "symlink to the key's folder": (plant_symlink_to_key_folder, "is a symbolic link"),
}


@pytest.mark.parametrize("kind", LINKS)
def test_a_link_in_an_included_folder_leaks_with_a_naive_copy(project: Path, kind: str) -> None:
    """Control: the planted link is a real attack, whatever copies the folder naively gets the secret."""
    plant, _ = LINKS[kind]
    name = plant(project)
    copied = naive_copy(project / "conf", project.parent / "naive")
    leaked = b"".join(data for path, data in copied.items() if path.startswith(name.removeprefix("conf/")))
    secret = b"PATH=" if "environ" in kind else SECRET.encode()  # /proc/self/environ: whoever reads it
    assert secret in leaked


@pytest.mark.parametrize("kind", LINKS)
def test_a_link_in_an_included_folder_is_refused_naming_it(project: Path, kind: str) -> None:
    plant, words = LINKS[kind]
    name = plant(project)
    done = capture_with_include(project, "conf")
    assert_refused(done, f"included file {name}", words, "follows no link")
    assert_nothing_written(project)


def test_an_include_that_is_itself_a_link_is_refused(project: Path) -> None:
    (project / "settings.json").symlink_to(project / "conf" / "settings.json")
    assert (project / "settings.json").read_text() == '{"scale": 2}'  # control: it reads like the file
    assert_refused(capture_with_include(project, "settings.json"), "--include project/settings.json", "symbolic link")


def test_a_link_swapped_in_after_the_walk_is_refused_on_open(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is stat'ed when the folder is walked, then read: a symlink put in between is still refused."""
    real_walk = includes_module._files_under

    def walk_then_swap(top: Path, item: Path) -> Iterator[tuple[Path, os.stat_result]]:
        found = list(real_walk(top, item))
        settings = project / "conf" / "settings.json"
        settings.unlink()
        settings.symlink_to(key_of(project))  # the race a hostile process could win
        yield from found

    monkeypatch.setattr(includes_module, "_files_under", walk_then_swap)
    with pytest.raises(IncludeError, match=r"included file conf/settings.json is a symbolic link"):
        collect_includes(project / "repro.py", [project / "conf"])


# ------------------------------------------------------------------ sizes and kinds


def test_a_sparse_3_gb_file_is_refused_from_its_size_without_reading_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = project / "conf" / "weights.bin"
    subprocess.run(["truncate", "-s", "3G", str(big)], check=True)
    assert big.stat().st_size == 3 << 30 and big.stat().st_blocks == 0  # the attacker's disk pays nothing
    opened: list[Path] = []
    real_read = includes_module.read_regular_bytes

    def spy(path: Path, *args: object, **kwargs: bool) -> bytes:
        opened.append(path)
        return real_read(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(includes_module, "read_regular_bytes", spy)
    with pytest.raises(IncludeError, match=rf"included file conf/weights.bin is {3 << 30} bytes \(at most"):
        collect_includes(project / "repro.py", [project / "conf"])
    assert opened == []  # refused from its stat: not one byte read, and settings.json not read either
    started = time.monotonic()
    assert_refused(capture_with_include(project, "conf"), "conf/weights.bin", "bytes (at most")
    assert time.monotonic() - started < 60


def test_control_a_naive_read_of_a_sparse_file_reads_all_of_it(tmp_path: Path) -> None:
    """Control: reading first and checking the size after costs the whole claimed size in memory."""
    sparse = tmp_path / "claims.bin"
    subprocess.run(["truncate", "-s", str(16 * MAX_FILE_BYTES), str(sparse)], check=True)
    assert len(sparse.read_bytes()) == 16 * MAX_FILE_BYTES  # the old order: read_bytes(), then len() > limit


def test_a_fifo_in_an_included_folder_is_refused_not_skipped_or_waited_on(project: Path) -> None:
    fifo = project / "conf" / "pipe"
    os.mkfifo(fifo)
    kept = [p.name for p in (project / "conf").rglob("*") if p.is_file()]
    assert kept == ["settings.json"]  # control: a naive walk drops it silently, the user never learns
    assert_refused(capture_with_include(project, "conf"), "included file conf/pipe", "not a regular file")


# ------------------------------------------------------------------ names that collide


def case_insensitive_folder(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs mounted with casefold (what macOS and Windows give by default), or a skip naming why."""
    folder = tmp_path / "casefold"
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,casefold", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"no case-insensitive file system to mount here: {done.stderr.strip()[:120]}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.fixture
def casefold_folder(tmp_path: Path) -> Iterator[Path]:
    yield from case_insensitive_folder(tmp_path)


def test_control_names_differing_in_case_are_one_file_on_a_case_insensitive_disk(casefold_folder: Path) -> None:
    (casefold_folder / "repro.py").write_text(REPRO)
    (casefold_folder / "Repro.py").write_text("print('improved')\n")  # an include laid out naively
    assert (casefold_folder / "repro.py").read_text() == "print('improved')\n"  # the script was replaced


@pytest.mark.parametrize(
    ("names", "words"),
    [
        (["conf/Helper.py", "conf/helper.py"], "conf/Helper.py and conf/helper.py differ only in case"),
        (["Repro.py"], "included file Repro.py is named like the script repro.py"),
    ],
)
def test_names_that_collide_on_a_case_insensitive_disk_are_refused(project: Path, names: list[str], words: str):
    for name in names:
        (project / name).write_text("VALUE = 1\n")
    assert_refused(capture_with_include(project, "."), words)
    assert_nothing_written(project)


def test_the_fixed_script_beside_the_repro_is_never_an_include(project: Path) -> None:
    (project / "fixed.py").write_text(REPRO)
    both = collect_includes(project / "repro.py", [project], [project / "fixed.py"])
    assert [f.path for f in both] == ["conf/settings.json"]
    with pytest.raises(IncludeError, match="named like the script"):  # without saying so, it would clash
        includes_module.check_layout(["fixed.py"], ["repro.py", "fixed.py"])
