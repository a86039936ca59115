"""Real wheels of small libraries built here, and interpreters over an existing torch to install them in.

A wheel is PEP 427's: the modules, METADATA, WHEEL and RECORD (hashes and sizes), installed by pip offline.
An interpreter is a venv of its own whose site-packages holds another environment's packages as hard links
(no copy on disk, and no path line to a folder outside it: the sandbox shows an environment its own folders
only), so each one is a real target with that torch, differing in what is installed beside it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

# Installed beside torch here and not what a target needs (casekit runs outside the targets it probes).
NOT_LINKED = ("casekit", "__editable__", "_casekit")
SITE_QUERY = (
    "import json, sys, sysconfig; from pathlib import Path; "
    "config = Path(sys.prefix, 'pyvenv.cfg'); "
    "print(json.dumps([sysconfig.get_paths()['purelib'], "
    "config.is_file() and 'include-system-site-packages = true' in config.read_text()]))"
)


def build_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A real wheel of `name` `version` holding `files` (path inside the wheel -> text)."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: casekit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for file, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{file},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in files.items():
            archive.writestr(file, text)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def env_over(folder: Path, python: str = sys.executable) -> str:
    """A venv at `folder` with the packages of `python`'s environment (its torch among them) linked into its
    site-packages, and the system's site-packages where that environment sees them too."""
    found = subprocess.run([python, "-c", SITE_QUERY], check=True, capture_output=True, text=True)
    purelib, system_site = json.loads(found.stdout)
    system = ["--system-site-packages"] if system_site else []
    subprocess.run([python, "-m", "venv", "--without-pip", *system, str(folder)], check=True)
    (site,) = (folder / "lib").glob("python*/site-packages")
    present = {entry.name for entry in site.iterdir()}
    for entry in Path(purelib).iterdir():
        if not entry.name.startswith(NOT_LINKED) and entry.name not in present:
            subprocess.run(["cp", "-al", str(entry), str(site / entry.name)], check=True)
    return str(folder / "bin" / "python")


def install_wheel(python: str, wheel: Path) -> None:
    """This pip installs the wheel into `python`'s environment (which may have no pip), offline, nothing else."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index", "--no-deps", str(wheel)],
        check=True,
    )
