"""`casekit envs prune` / `envs remove`: never through a link, never outside the cache's real path.

Links planted in the cache (an env entry, `envs/` itself, a build leftover, a download cache) point at
a folder of precious files outside it. After a prune, the precious files are all there; each link
entry is removed as a link and named in one line; `envs/` as a link is refused in one line. Beside
each, the control: the plain rmtree the old code did deletes the files behind the link.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from casekit.errors import CasekitError
from casekit.runners.venv.cache import ENV_SCHEMA, MARKER, list_envs, prune_envs, remove_env

from ..conftest import run_casekit

KEY = "torch-2.13.0-py3.11-0123abcd"


def env_folder(path: Path) -> Path:
    """A folder shaped like a built env: bin/python and the completion marker."""
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("#!/bin/sh\n")
    (path / MARKER).write_text(json.dumps({"schema": ENV_SCHEMA, "torch": "2.13.0"}))
    return path


def precious(tmp_path: Path) -> Path:
    """Someone's folder outside the cache, with an env-shaped folder and files in it."""
    outside = tmp_path / "outside"
    env_folder(outside / KEY)
    (outside / "thesis.tex").write_text("years of work\n")
    return outside


def still_there(outside: Path) -> list[str]:
    return sorted(str(path.relative_to(outside)) for path in outside.rglob("*"))


BEFORE = sorted([KEY, f"{KEY}/bin", f"{KEY}/bin/python", f"{KEY}/{MARKER}", "thesis.tex"])


def entries(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.endswith(".lock"))  # locks stay, by design


def test_an_env_entry_that_is_a_link_is_removed_as_a_link_in_one_line(tmp_path: Path) -> None:
    outside = precious(tmp_path)
    cache = tmp_path / "cache"
    env_folder(cache / "envs" / "torch-2.12.1-py3.11-89abcdef")
    (cache / "envs" / "linked").symlink_to(outside)
    (cache / "envs" / "linked-env").symlink_to(outside / KEY)
    assert [env.key for env in list_envs(cache)] == ["torch-2.12.1-py3.11-89abcdef"]  # a link is no env
    result = prune_envs(cache, everything=True)
    assert result.removed == ["torch-2.12.1-py3.11-89abcdef"]
    assert result.links == [
        f"envs/linked was a symbolic link (to {outside}): removed the link only, not what it points at",
        f"envs/linked-env was a symbolic link (to {outside / KEY}): removed the link only, not what it points at",
    ]
    assert entries(cache / "envs") == [] and still_there(outside) == BEFORE


def test_envs_remove_of_a_link_removes_the_link(tmp_path: Path) -> None:
    outside = precious(tmp_path)
    cache = tmp_path / "cache"
    (cache / "envs").mkdir(parents=True)
    (cache / "envs" / KEY).symlink_to(outside / KEY)
    assert remove_env(KEY, cache) == (
        f"envs/{KEY} was a symbolic link (to {outside / KEY}): removed the link only, not what it points at"
    )
    assert not os.path.lexists(cache / "envs" / KEY) and still_there(outside) == BEFORE


def test_control_a_plain_rmtree_of_an_env_link_is_a_traceback_or_deletes_the_target(tmp_path: Path) -> None:
    outside = precious(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(outside / KEY)
    with pytest.raises(OSError, match="symbolic link"):
        shutil.rmtree(link)  # what `envs prune` did: a traceback
    with pytest.raises(NotADirectoryError):  # one slash more and the same call follows the link...
        shutil.rmtree(f"{link}/")
    assert still_there(outside) == ["thesis.tex", KEY]  # ...and empties the folder behind it first


def test_an_envs_folder_that_is_a_link_is_refused_in_one_line(tmp_path: Path) -> None:
    outside = precious(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "envs").symlink_to(outside)
    for attempt in (lambda: prune_envs(cache, everything=True), lambda: remove_env(KEY, cache)):
        with pytest.raises(CasekitError) as raised:
            attempt()
        assert str(raised.value) == (
            f"{cache / 'envs'} is a symbolic link (to {outside}): casekit deletes nothing through a link; "
            "point CASEKIT_CACHE at the real cache, or remove the link"
        )
    assert still_there(outside) == BEFORE


def test_control_through_an_envs_link_the_old_prune_deleted_the_folders_it_points_at(tmp_path: Path) -> None:
    outside = precious(tmp_path)
    (tmp_path / "cache").mkdir()
    envs = tmp_path / "cache" / "envs"
    envs.symlink_to(outside)
    for path in sorted(envs.iterdir()):  # the old list_envs + remove_env
        if path.is_dir():
            shutil.rmtree(path)
    assert still_there(outside) == ["thesis.tex"]


def test_leftovers_and_download_caches_that_are_links_are_not_followed(tmp_path: Path) -> None:
    outside = precious(tmp_path)
    cache = tmp_path / "cache"
    (cache / "envs").mkdir(parents=True)
    (cache / "envs" / f"{KEY}.tmp-123").symlink_to(outside / KEY)  # a build leftover's name
    (cache / "envs" / "gone.build.log").symlink_to(outside / "thesis.tex")
    (cache / "uv").symlink_to(outside)  # a download cache
    (cache / "pip").mkdir()
    (cache / "pip" / "wheel").write_text("cached\n")
    result = prune_envs(cache, everything=True)
    assert len(result.links) == 2 and result.caches_cleared == [str(cache / "pip")]
    assert not (cache / "pip").exists() and (cache / "uv").is_symlink()
    assert still_there(outside) == BEFORE


def test_a_cache_root_that_is_the_users_link_still_prunes_inside_it(tmp_path: Path) -> None:
    real = tmp_path / "scratch" / "casekit"
    env_folder(real / "envs" / KEY)
    (tmp_path / "cache").symlink_to(real)
    assert prune_envs(tmp_path / "cache", everything=True).removed == [KEY]
    assert entries(real / "envs") == []


@pytest.mark.process
def test_the_prune_command_says_one_line_per_link_and_refuses_an_envs_link(tmp_path: Path) -> None:
    outside = precious(tmp_path)
    cache = tmp_path / "cache"
    (cache / "envs").mkdir(parents=True)
    (cache / "envs" / "linked").symlink_to(outside)
    done = run_casekit("envs", "prune", "--all", env={"CASEKIT_CACHE": str(cache)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        f"envs/linked was a symbolic link (to {outside}): removed the link only, not what it points at"
    )
    (cache / "envs").rmdir()
    (cache / "envs").symlink_to(outside)
    done = run_casekit("envs", "prune", "--all", env={"CASEKIT_CACHE": str(cache)}, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"casekit: error: {cache / 'envs'} is a symbolic link (to {outside}): casekit deletes nothing through a "
        "link; point CASEKIT_CACHE at the real cache, or remove the link"
    ]
    assert still_there(outside) == BEFORE
