"""The shared mechanisms: versions (PEP 440 via packaging), fsutil (atomic write, lock, tail), settings."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from casekit import fsutil, settings
from casekit.errors import CasekitError
from casekit.runners.torch_source.request import is_exact, matches_request, pick_newest
from casekit.versions import VersionError, parse_version, sort_versions, version_order, without_local

# ------------------------------------------------------------------ versions


def test_versions_order_like_pep_440_with_local_tags_ignored() -> None:
    shuffled = ["2.13.0+cpu", "2.6.0", "2.6.0a0", "2.5.1", "2.6.0.dev20241001", "2.6.0rc1", "2.6.0.post1", "1!0.1"]
    assert sort_versions(shuffled) == [
        "2.5.1",
        "2.6.0.dev20241001",
        "2.6.0a0",
        "2.6.0rc1",
        "2.6.0",
        "2.6.0.post1",
        "2.13.0+cpu",
        "1!0.1",
    ]
    assert parse_version("2.13.0+cu124") == parse_version("2.13.0")
    assert parse_version("2.6") == parse_version("2.6.0")


def test_a_bad_version_is_one_casekit_error() -> None:
    with pytest.raises(VersionError, match="'2.x' is not a version") as caught:
        parse_version("2.x")
    assert isinstance(caught.value, CasekitError)


def test_exact_requests_and_prefixes() -> None:
    assert all(is_exact(v) for v in ("2.5.1", "2.13.0+cpu", "2.6.0.dev20241112", "2.6.0rc1", "2.6rc1"))
    assert not any(is_exact(v) for v in ("2.13", "2", "latest", ""))
    available = ["2.1.2", "2.10.0", "2.13.0+cpu", "2.13.1rc1", "2.13.0.post1", "junk"]
    assert pick_newest(available, "2.1") == "2.1.2"
    assert pick_newest(available, "2.13") == "2.13.0"
    assert pick_newest(available, None) == "2.13.0"
    assert pick_newest(available, "3") is None


def test_installed_matches_request_and_report_keys() -> None:
    # what the python runner checks an interpreter's torch against
    assert matches_request("2.13.0+cpu", "2.13") and matches_request("2.13.0+cpu", "2.13.0+cpu")
    assert matches_request("2.13.0+cpu", "2.13.0")
    assert not matches_request("2.13.0", "2.1") and not matches_request("2.13.0+cpu", "2.13.0+cu124")
    assert not matches_request("2.13.0", "2.13.1")
    assert without_local("2.13.0+cu124") == "2.13.0" and without_local("?") == "?"
    assert sorted(["2.13.0+cpu", "unknown", "2.5.1", "2.10.0", "2.10.0.dev20250101"], key=version_order) == [
        "2.5.1",
        "2.10.0.dev20250101",
        "2.10.0",
        "2.13.0+cpu",
        "unknown",
    ]
    assert version_order("2.13.0+cpu") == version_order("2.13.0")  # the build label does not order


# -------------------------------------------------------------------- fsutil


@pytest.mark.process
def test_atomic_write_gives_the_umask_mode_without_touching_the_umask(tmp_path: Path) -> None:
    # A child with umask 027 must get 0640 files: the mode follows the umask it started with.
    code = (
        "import os, sys; from pathlib import Path; from casekit import fsutil; "
        "fsutil.write_atomic(Path(sys.argv[1]), 'x'); print(oct(os.stat(sys.argv[1]).st_mode & 0o777))"
    )
    target = tmp_path / "a.txt"
    done = subprocess.run(
        ["sh", "-c", f'umask 027 && exec "{sys.executable}" -c "{code}" {target}'],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        check=True,
    )
    assert done.stdout.strip() == "0o640"
    fsutil.write_atomic(target, b"bytes too", durable=False)
    assert target.read_bytes() == b"bytes too"
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what open() makes under this process's umask
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "plain.txt"]


def test_atomic_write_never_writes_through_a_link_at_its_temporary_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    planted = tmp_path / f".doc.json.{'00' * 6}.tmp"
    planted.symlink_to(victim)
    names = iter([b"\x00" * 6, b"\x01" * 6])  # the first name drawn is the planted one
    monkeypatch.setattr(fsutil.os, "urandom", lambda n: next(names))
    fsutil.write_atomic(tmp_path / "doc.json", "new")
    assert victim.read_text() == "untouched" and planted.is_symlink()
    assert (tmp_path / "doc.json").read_text() == "new" and not (tmp_path / "doc.json").is_symlink()
    assert not (tmp_path / f".doc.json.{'01' * 6}.tmp").exists()


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "sub" / "doc.json"
    fsutil.write_atomic(target, "old")

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fsutil.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fsutil.write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in target.parent.iterdir()] == ["doc.json"]


@pytest.mark.process
def test_lock_excludes_another_process_and_says_it_waits(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(1.0)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waited: list[float] = []
    started = time.monotonic()
    with fsutil.exclusive_lock(lock, on_wait=lambda: waited.append(time.monotonic())):
        acquired = time.monotonic() - started
    holder.wait()
    assert len(waited) == 1 and acquired >= 0.5


def test_lock_serializes_threads(tmp_path: Path) -> None:
    inside: list[int] = []
    overlaps: list[int] = []

    def work() -> None:
        with fsutil.exclusive_lock(tmp_path / "t.lock"):
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            time.sleep(0.02)
            inside.pop()

    threads = [threading.Thread(target=work) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []


def test_tail_is_bounded_and_lenient(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"a" * 100 + "é".encode() + b"end")
    assert fsutil.tail_text(log, limit=4) == "\ufffdend"  # cut inside a character: replaced, not an error
    assert fsutil.tail_text(log, limit=10_000, start=100) == "éend"
    assert fsutil.tail_text(tmp_path / "missing") == ""


# ------------------------------------------------------------------ settings


def test_settings_read_the_environment_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASEKIT_CACHE", str(tmp_path))
    assert settings.cache_root() == tmp_path
    assert settings.envs_root() == tmp_path / "envs"
    assert settings.bisect_cache_path() == tmp_path / "bisect-cache.json"
    monkeypatch.delenv("CASEKIT_CACHE")
    assert settings.cache_root() == Path("~/.cache/casekit").expanduser()
    monkeypatch.setenv("CASEKIT_ARCHIVE", "elsewhere")
    assert settings.archive_root() == Path("elsewhere") and settings.archive_root("given") == Path("given")
    monkeypatch.setenv("CASEKIT_INSTALLER", "conda")
    assert settings.forced_installer() is None
    monkeypatch.setenv("CASEKIT_INSTALLER", "pip")
    assert settings.forced_installer() == "pip"
    monkeypatch.setenv("DOCKER_HOST", "ssh://gpu-box")
    assert settings.docker_host_is_remote()
    monkeypatch.delenv("DOCKER_HOST")
    assert settings.docker_host() == "unix:///var/run/docker.sock" and not settings.docker_host_is_remote()


def test_ca_bundle_discovery_prefers_the_casekit_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, pips = tmp_path / "ours.pem", tmp_path / "pip.pem"
    ours.write_text("x")
    pips.write_text("y")
    monkeypatch.setenv("PIP_CERT", str(pips))
    monkeypatch.setenv("CASEKIT_CA_BUNDLE", str(ours))
    assert settings.host_ca_bundle() == ours
    monkeypatch.setenv("CASEKIT_CA_BUNDLE", str(tmp_path / "missing.pem"))  # a dangling setting is skipped
    assert settings.host_ca_bundle() == pips


def test_read_regular_bytes_reads_only_bounded_regular_files(tmp_path: Path) -> None:
    import os

    from casekit.fsutil import UnreadableFile, read_regular_bytes

    plain = tmp_path / "plain.json"
    plain.write_bytes(b"x" * 10)
    assert read_regular_bytes(plain, 10) == b"x" * 10
    with pytest.raises(UnreadableFile, match="over the 9 byte limit"):
        read_regular_bytes(plain, 9)
    link = tmp_path / "link.json"
    link.symlink_to(plain)
    with pytest.raises(UnreadableFile, match="symbolic link"):
        read_regular_bytes(link, 100)
    assert read_regular_bytes(link, 100, follow_symlinks=True) == b"x" * 10  # a user's own path may be a link
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFile, match="not a regular file"):
        read_regular_bytes(fifo, 100)  # returns at once: a FIFO without a writer never blocks the open
    with pytest.raises(UnreadableFile, match="folder"):
        read_regular_bytes(tmp_path, 100)
    with pytest.raises(FileNotFoundError):
        read_regular_bytes(tmp_path / "missing", 100)
