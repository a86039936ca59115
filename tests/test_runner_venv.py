"""The venv runner: real managed environments, built with uv (or pip) into a temporary cache.

torch 2.13.0 installs from the local wheel in /opt/wheels in seconds with uv,
so most tests build real envs. The torch 2.5.1 env lives in the default cache
(~/.cache/casekit) and is built once, on first use (minutes, ~3 GB from PyPI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from casekit.errors import CasekitError, EnvironmentFailed
from casekit.runners.interface import ProbeJob, TargetSpec
from casekit.runners.registry import make_runner
from casekit.runners.torch_source.request import is_exact, pick_newest
from casekit.runners.venv import (
    MARKER,
    EnvRequest,
    VenvRunner,
    list_envs,
    remove_env,
)
from casekit.settings import cache_root

LOCAL_WHEELS = Path("/opt/wheels")
SPEC = TargetSpec("venv", torch="2.13.0", find_links=str(LOCAL_WHEELS))
REPO_ROOT = Path(__file__).resolve().parent.parent

needs_local_wheel = pytest.mark.skipif(
    not any(LOCAL_WHEELS.glob("torch-2.13.0*.whl")), reason="no local torch 2.13.0 wheel in /opt/wheels"
)

ITEM_BREAK = """\
import torch

@torch.compile
def scale_by_total(x):
    total = x.sum().item()  # graph break: Tensor.item
    return x * total

print(scale_by_total(torch.ones(3)))
"""


def quiet(_line: str) -> None:
    pass


# ------------------------------------------------------------ pure parts


def test_exact_versions_pass_through_and_partial_ones_are_resolved() -> None:
    assert is_exact("2.5.1") and is_exact("2.13.0+cpu") and is_exact("2.6.0.dev20241112") and is_exact("2.6.0rc1")
    assert not is_exact("2.13") and not is_exact("2")


def test_newest_release_under_a_prefix() -> None:
    available = ["2.15.0", "2.14.1", "2.13.0+cpu", "2.13.0", "2.12.1", "2.13.1rc1", "2.1.2", "2.10.0"]
    assert pick_newest(available, "2.13") == "2.13.0"  # not the release candidate; local label dropped
    assert pick_newest(available, "2.1") == "2.1.2"  # a prefix of numbers, not of text: 2.10 is not 2.1.x
    assert pick_newest(available, "2") == "2.15.0"
    assert pick_newest(available, None) == "2.15.0"
    assert pick_newest(available, "2.99") is None


def test_key_is_readable_and_changes_with_every_field() -> None:
    base = EnvRequest(python=None, python_version="3.11", torch="2.5.1", cuda="cu124")
    assert base.key.startswith("torch-2.5.1-cu124-py3.11-") and len(base.key.rsplit("-", 1)[1]) == 8
    assert base.effective_index_url == "https://download.pytorch.org/whl/cu124"
    variants = [
        EnvRequest(python=None, python_version="3.11", torch="2.5.1"),
        EnvRequest(python=None, python_version="3.12", torch="2.5.1", cuda="cu124"),
        EnvRequest(python=None, python_version="3.11", torch="2.5.1", cuda="cu124", index_url="https://mirror/simple"),
        EnvRequest(python=None, python_version="3.11", torch="2.5.1", cuda="cu124", find_links="/opt/wheels"),
        EnvRequest(python=None, python_version="3.11", torch="2.5.1", cuda="cu124", extra_packages=("numpy==2.1.0",)),
    ]
    assert len({base.key, *(variant.key for variant in variants)}) == 1 + len(variants)
    pins_in_other_order = (
        EnvRequest(python=None, python_version="3.11", torch="2.5.1", extra_packages=("b==1", "a==2")).key
        == EnvRequest(python=None, python_version="3.11", torch="2.5.1", extra_packages=("a==2", "b==1")).key
    )
    assert pins_in_other_order


def test_cache_lives_under_casekit_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CASEKIT_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    assert VenvRunner(SPEC).root == tmp_path
    monkeypatch.delenv("CASEKIT_CACHE")
    assert cache_root() == Path("~/.cache/casekit").expanduser()


def test_installer_environment_trusts_the_hosts_ca_and_keeps_uvs_cache_beside_the_envs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from casekit.runners.venv.install import installer_environment

    proxy_ca = tmp_path / "proxy-ca.pem"
    proxy_ca.write_text("-----BEGIN CERTIFICATE-----\n")
    for variable in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "UV_CACHE_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CASEKIT_CA_BUNDLE", str(proxy_ca))  # the same discovery the docker image build uses
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    env = installer_environment(tmp_path)
    assert env["SSL_CERT_FILE"] == env["PIP_CERT"] == str(proxy_ca)
    assert env["UV_CACHE_DIR"] == str(tmp_path / "uv")
    assert "PYTHONPATH" not in env


def test_registry_makes_each_runner() -> None:
    assert type(make_runner(TargetSpec("venv", torch="2.5.1"))).__name__ == "VenvRunner"
    assert type(make_runner(TargetSpec("python"))).__name__ == "PythonRunner"
    with pytest.raises(CasekitError, match="unknown runner 'conda'"):
        make_runner(TargetSpec("conda"))


def test_removing_an_unknown_or_unsafe_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CasekitError, match="not an env key"):
        remove_env("../etc", tmp_path)
    with pytest.raises(CasekitError, match="no cached env torch-0"):
        remove_env("torch-0", tmp_path)


# ------------------------------------------------------------- real envs


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("casekit-cache")


@pytest.fixture(scope="module")
def built(cache: Path) -> tuple[VenvRunner, float, list[str]]:
    """A torch 2.13.0 env built from the local wheel: the runner, seconds taken, progress lines."""
    lines: list[str] = []
    runner = VenvRunner(SPEC, cache_dir=cache)
    started = time.monotonic()
    runner.prepare(lines.append)
    took = time.monotonic() - started
    print(f"\nbuilt the torch 2.13.0 env in {took:.1f} s with {runner.installer}")
    return runner, took, lines


def marker_of(runner: VenvRunner) -> dict[str, object]:
    assert runner.env is not None
    return json.loads((runner.env.path / MARKER).read_text())


@needs_local_wheel
@pytest.mark.slow
def test_build_installs_torch_and_writes_the_marker_last(
    built: tuple[VenvRunner, float, list[str]], cache: Path
) -> None:
    runner, _, lines = built
    assert runner.env is not None
    assert runner.env.key.startswith(f"torch-2.13.0-py{sys.version_info.major}.{sys.version_info.minor}-")
    assert runner.env.path == cache / "envs" / runner.env.key
    marker = marker_of(runner)
    assert str(marker["torch"]).startswith("2.13.0")
    assert marker["python"] == sys.version.split()[0]
    assert marker["request"]["find_links"] == str(LOCAL_WHEELS)  # type: ignore[index]
    assert any(line.startswith("creating venv ") for line in lines)
    assert any(line.startswith("installing torch==2.13.0 ") for line in lines)
    assert not list((cache / "envs").glob("*.tmp-*"))
    assert runner.describe()["torch"] == marker["torch"]


@needs_local_wheel
@pytest.mark.slow
def test_second_prepare_reuses_the_env_in_under_a_second(
    built: tuple[VenvRunner, float, list[str]], cache: Path
) -> None:
    first, _, _ = built
    created = marker_of(first)["created"]
    lines: list[str] = []
    again = VenvRunner(SPEC, cache_dir=cache)
    started = time.monotonic()
    again.prepare(lines.append)
    took = time.monotonic() - started
    print(f"\nreused the env in {took * 1000:.0f} ms")
    assert took < 1.0
    assert again.env is not None and first.env is not None and again.env.path == first.env.path
    assert lines == [f"reusing env {first.env.key}"]
    assert marker_of(again)["created"] == created


@needs_local_wheel
@pytest.mark.slow
def test_partial_version_resolves_to_the_same_env(built: tuple[VenvRunner, float, list[str]], cache: Path) -> None:
    first, _, _ = built
    lines: list[str] = []
    newest = VenvRunner(TargetSpec("venv", torch="2.13", find_links=str(LOCAL_WHEELS)), cache_dir=cache)
    newest.prepare(lines.append)
    assert "torch 2.13 is 2.13.0" in lines
    assert newest.env is not None and first.env is not None and newest.env.key == first.env.key


@needs_local_wheel
@pytest.mark.slow
def test_probe_runs_inside_the_env(built: tuple[VenvRunner, float, list[str]], tmp_path: Path) -> None:
    runner, _, _ = built
    assert runner.env is not None
    script = tmp_path / "item_break.py"
    script.write_text(ITEM_BREAK)
    result = runner.run_probe([ProbeJob("item-break:pre", script)], quiet)
    assert result.environment["torch"] == marker_of(runner)["torch"]
    assert result.environment["python_executable"] == str(runner.env.python_executable)
    compiled = result.results["item-break:pre"]["runs"]["compiled"]  # type: ignore[index]
    assert any(record["kind"] == "graph_breaks" for record in compiled["records"])


@needs_local_wheel
@pytest.mark.slow
def test_env_built_with_bytecode_and_one_without_it_is_compiled_once_before_use(
    built: tuple[VenvRunner, float, list[str]], cache: Path
) -> None:
    from casekit.runners.venv.cache import bytecode_counts, lacks_bytecode, site_folders

    first, _, _ = built
    assert first.env is not None
    counts = marker_of(first)["bytecode"]
    assert isinstance(counts, dict) and counts["pyc"] >= 0.99 * counts["py"] > 1000, counts
    # as an env built before casekit compiled at build time: torch's top-level modules without bytecode
    [site] = site_folders(first.env.path)
    shutil.rmtree(site / "torch" / "__pycache__")
    assert lacks_bytecode(first.env.path)
    lines: list[str] = []
    again = VenvRunner(SPEC, cache_dir=cache)
    again.prepare(lines.append)
    assert any("has no bytecode: compiling it once" in line for line in lines), lines
    assert not lacks_bytecode(first.env.path)
    assert marker_of(again)["bytecode"] == bytecode_counts(first.env.path)
    lines.clear()
    VenvRunner(SPEC, cache_dir=cache).prepare(lines.append)
    assert lines == [f"reusing env {first.env.key}"], "compiled once: the next use just reuses it"


@needs_local_wheel
@pytest.mark.slow
def test_env_without_marker_is_rebuilt(built: tuple[VenvRunner, float, list[str]], cache: Path) -> None:
    first, _, _ = built
    assert first.env is not None
    (first.env.path / MARKER).unlink()
    leftover = cache / "envs" / f"{first.env.key}.tmp-999999"  # a build that was killed
    leftover.mkdir()
    lines: list[str] = []
    VenvRunner(SPEC, cache_dir=cache).prepare(lines.append)
    assert any("half-built or broken (no completion marker" in line for line in lines)
    assert (first.env.path / MARKER).exists()
    assert not leftover.exists()


@needs_local_wheel
@pytest.mark.slow
def test_env_whose_python_is_gone_is_rebuilt(built: tuple[VenvRunner, float, list[str]], cache: Path) -> None:
    first, _, _ = built
    assert first.env is not None
    first.env.python_executable.unlink()
    lines: list[str] = []
    again = VenvRunner(SPEC, cache_dir=cache)
    again.prepare(lines.append)
    assert any("half-built or broken (its python is missing)" in line for line in lines)
    assert again.env is not None and again.env.python_executable.exists()


@needs_local_wheel
@pytest.mark.slow
def test_env_whose_torch_cannot_be_imported_is_rebuilt_after_the_failed_run(
    built: tuple[VenvRunner, float, list[str]], cache: Path, tmp_path: Path
) -> None:
    runner = VenvRunner(SPEC, cache_dir=cache)
    runner.prepare(quiet)
    assert runner.env is not None
    init = next(runner.env.path.glob("lib/python*/site-packages/torch/__init__.py"))
    init.unlink()  # a new file, not a write through uv's hardlink into its cache
    init.write_text("raise ImportError('damaged on purpose')\n")
    script = tmp_path / "item_break.py"
    script.write_text(ITEM_BREAK)
    with pytest.raises(EnvironmentFailed, match="torch is not importable: ImportError: damaged on purpose"):
        runner.run_probe([ProbeJob("item-break:pre", script)], quiet)
    lines: list[str] = []
    VenvRunner(SPEC, cache_dir=cache).prepare(lines.append)
    assert any("half-built or broken (marked broken after a failed run" in line for line in lines)
    assert "damaged" not in init.read_text()


PREPARE_IN_A_PROCESS = """\
import sys
from pathlib import Path
from casekit.runners.interface import TargetSpec
from casekit.runners.venv import VenvRunner
spec = TargetSpec("venv", torch="2.13.0", find_links=sys.argv[2])
runner = VenvRunner(spec, cache_dir=Path(sys.argv[1]))
runner.prepare(lambda line: print(line, flush=True))
print("ENV", runner.env.path)
"""


@needs_local_wheel
@pytest.mark.slow
def test_two_processes_preparing_at_once_build_one_env(built: tuple[VenvRunner, float, list[str]], cache: Path) -> None:
    first, _, _ = built
    assert first.env is not None
    remove_env(first.env.key, cache)
    command = [sys.executable, "-c", PREPARE_IN_A_PROCESS, str(cache), str(LOCAL_WHEELS)]
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    builds = sum(output.count("creating venv ") for output in outputs)
    assert builds == 1, outputs
    assert {line for output in outputs for line in output.splitlines() if line.startswith("ENV ")} == {
        f"ENV {first.env.path}"
    }
    assert any("reusing env" in output for output in outputs)
    assert [env.key for env in list_envs(cache)] == [first.env.key]
    assert not list((cache / "envs").glob("*.tmp-*"))


@needs_local_wheel
@pytest.mark.slow
def test_list_and_remove_cached_envs(built: tuple[VenvRunner, float, list[str]], cache: Path) -> None:
    runner = VenvRunner(SPEC, cache_dir=cache)
    runner.prepare(quiet)
    assert runner.env is not None
    listed = {env.key: env for env in list_envs(cache)}
    assert listed[runner.env.key].complete and str(listed[runner.env.key].torch).startswith("2.13.0")
    remove_env(runner.env.key, cache)
    assert runner.env.key not in {env.key for env in list_envs(cache)}
    assert not runner.env.path.exists()


@pytest.mark.slow
def test_unreachable_cuda_index_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # download.pytorch.org cannot be reached from this network (its name does not resolve: no traffic
    # leaves); elsewhere this builds a real env. casekit reads the variant's listing itself, so that is
    # where it stops, naming the index and how to name a mirror.
    if subprocess.run(["getent", "hosts", "download.pytorch.org"], capture_output=True).returncode == 0:
        pytest.skip("download.pytorch.org resolves here")
    monkeypatch.delenv("CASEKIT_TORCH_INDEX", raising=False)
    runner = VenvRunner(TargetSpec("venv", torch="2.5.1", cuda="cu124"), cache_dir=tmp_path)
    pattern = r"cannot reach https://download\.pytorch\.org/whl/cu124/torch/: .*CASEKIT_TORCH_INDEX=URL names a mirror"
    with pytest.raises(EnvironmentFailed, match=pattern):
        runner.prepare(quiet)
    assert not list((tmp_path / "envs").glob("*.tmp-*"))
    assert [env.key for env in list_envs(tmp_path)] == []


@needs_local_wheel
@pytest.mark.slow
def test_pip_builds_the_env_when_uv_is_absent(tmp_path: Path) -> None:
    runner = VenvRunner(SPEC, cache_dir=tmp_path, installer="pip")
    lines: list[str] = []
    started = time.monotonic()
    runner.prepare(lines.append)
    print(f"\nbuilt the torch 2.13.0 env in {time.monotonic() - started:.1f} s with pip")
    assert any(line.startswith("installing torch==2.13.0 ") and "with pip" in line for line in lines)
    assert str(marker_of(runner)["installer"]).startswith("pip ")
    assert str(marker_of(runner)["torch"]).startswith("2.13.0")


# ---------------------------------------------------- torch 2.5.1 (default cache)


@pytest.mark.torch251
@pytest.mark.slow
def test_managed_torch_251_env_replays_a_graph_break(tmp_path: Path) -> None:
    lines: list[str] = []
    runner = VenvRunner(TargetSpec("venv", torch="2.5.1"))  # the default cache: built once, then reused
    started = time.monotonic()
    runner.prepare(lines.append)
    print(f"\nprepared the torch 2.5.1 env in {time.monotonic() - started:.1f} s: {lines[-1]}")
    script = tmp_path / "item_break.py"
    script.write_text(ITEM_BREAK)
    result = runner.run_probe([ProbeJob("item-break:pre", script)], quiet)
    assert str(result.environment["torch"]).startswith("2.5.1")
    compiled = result.results["item-break:pre"]["runs"]["compiled"]  # type: ignore[index]
    assert compiled["status"] == "ok"
    assert any(record["kind"] == "graph_breaks" for record in compiled["records"])


@needs_local_wheel
@pytest.mark.slow
def test_a_prefix_and_its_exact_version_replay_as_one_target(
    built: tuple[VenvRunner, float, list[str]], cache: Path, tmp_path: Path
) -> None:
    """`--torch 2.13 --torch 2.13.0` on real envs: one build, so one label in the document and the history."""
    from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay

    from .fakes import captured_archive

    archive = captured_archive(tmp_path / "cases")
    choice = TargetChoice(torches=("2.13", "2.13.0"), find_links=str(LOCAL_WHEELS))
    request = ReplayRequest(targets=choice, case_ids=("breaks",))
    outcome = run_replay(request, archive, lambda spec: VenvRunner(spec, cache_dir=cache), quiet)
    assert [t.label for t in outcome.document.targets] == ["venv:torch-2.13.0"], outcome.document.targets
    assert [r.target for r in archive.load("breaks").replays] == ["venv:torch-2.13.0"]


@pytest.mark.process
def test_uv_is_found_from_its_package_with_no_uv_on_path(tmp_path: Path) -> None:
    """A pip or pipx install puts casekit's `uv` dependency in its venv, not on PATH: casekit still builds
    with uv. Control: with the package out of reach too, pip builds, as it must when no uv runs."""
    show = (
        "import shutil; from casekit.runners.venv.install import choose_installer, uv_binary; "
        "print(shutil.which('uv'), uv_binary(), choose_installer())"
    )
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    found = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, timeout=60, env=bare)
    assert found.returncode == 0, found.stderr
    which, binary, installer = found.stdout.split()
    import uv

    assert which == "None" and binary == uv.find_uv_bin() and installer == "uv"
    hidden = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['uv'] = None; " + show],
        capture_output=True, text=True, timeout=60, env=bare,
    )  # fmt: skip
    assert hidden.returncode == 0, hidden.stderr
    assert hidden.stdout.split() == ["None", "None", "pip"]


# ------------------------------------------------ the installer's own configuration refuses a build


@pytest.mark.slow
@needs_local_wheel
def test_a_build_refused_by_pips_configuration_names_where_the_constraint_is_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Real pip, a constraint file made here: pip alone says "The user requested (constraint) torch<=2.12.0";
    casekit's one line says which configuration set it (PIP_CONSTRAINT, then a pip.conf's `constraint`),
    so the person can lift it there. The same refusal with no configured constraint quoted names none."""
    from casekit.runners.venv.install import ensure_env

    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# the host's cap\ntorch<=2.12.0\n")
    request = EnvRequest(python=None, python_version="3.11", torch="2.13.0", find_links=str(LOCAL_WHEELS))
    monkeypatch.setenv("CASEKIT_CACHE", str(tmp_path / "cache"))

    def refusal() -> str:
        with pytest.raises(EnvironmentFailed) as failed:
            ensure_env(request, tmp_path / "cache", quiet, installer="pip")
        return str(failed.value)

    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    said = refusal()
    assert "\n" not in said
    assert "(constraint) torch<=2.12.0" in said, said  # pip's own words, kept
    assert (
        f"refused by pip's own configuration, not by casekit: torch<=2.12.0 from {constraints}, named by PIP_CONSTRAINT"
        in said
    ), said

    monkeypatch.delenv("PIP_CONSTRAINT")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nconstraint = {constraints}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    said = refusal()
    assert "\n" not in said
    assert f"torch<=2.12.0 from {constraints}, named by `constraint` in {conf} [global]" in said, said
    assert not list((tmp_path / "cache").glob("envs/torch-*/bin")), "a refused build publishes no env"

    # control: the same cap written as a requirement pip is asked for, not as configuration, names nothing
    monkeypatch.delenv("PIP_CONFIG_FILE")
    capped = EnvRequest(python=None, python_version="3.11", torch="2.13.0", find_links=str(LOCAL_WHEELS),
                        extra_packages=("torch<=2.12.0",))  # fmt: skip
    with pytest.raises(EnvironmentFailed) as failed:
        ensure_env(capped, tmp_path / "cache", quiet, installer="pip")
    assert "own configuration" not in str(failed.value), failed.value


@pytest.mark.slow
@needs_local_wheel
def test_a_build_refused_by_uvs_configuration_names_where_the_constraint_is_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Real uv (casekit's installer), which reads no pip configuration but its own: UV_CONSTRAINT. uv says
    "Because you require torch==2.13.0 and torch<=2.12.0, ..."; casekit's line says where torch<=2.12.0 is set."""
    from casekit.runners.venv.install import ensure_env

    constraints = tmp_path / "uv-constraints.txt"
    constraints.write_text("torch<=2.12.0\n")
    monkeypatch.setenv("CASEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_CONSTRAINT", str(constraints))
    request = EnvRequest(python=None, python_version="3.11", torch="2.13.0", find_links=str(LOCAL_WHEELS))
    with pytest.raises(EnvironmentFailed) as failed:
        ensure_env(request, tmp_path / "cache", quiet, installer="uv")
    said = str(failed.value)
    assert "\n" not in said
    assert "you require torch==2.13.0 and torch<=2.12.0" in said, said
    assert (
        f"refused by uv's own configuration, not by casekit: torch<=2.12.0 from {constraints}, named by UV_CONSTRAINT"
        in said
    ), said


@pytest.mark.process
def test_a_packaged_uv_that_cannot_run_gives_way_to_one_on_path_then_to_pip(tmp_path: Path) -> None:
    """`uv` installed for another platform (or truncated): its binary is there but does not run. casekit
    takes a uv on PATH that runs, and builds with pip only when none does (never a traceback or a build
    that fails at the first uv call)."""
    import uv

    shadow = tmp_path / "shadow"
    (shadow / "uv").mkdir(parents=True)
    foreign = tmp_path / "uv-of-another-platform"
    foreign.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(57))  # an ELF header the kernel will not execute
    foreign.chmod(0o755)
    (shadow / "uv" / "__init__.py").write_text(f"def find_uv_bin():\n    return {str(foreign)!r}\n")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "uv").symlink_to(uv.find_uv_bin())
    show = (
        "import uv; from casekit.runners.venv.install import choose_installer, uv_binary; "
        "print(uv.find_uv_bin(), uv_binary(), choose_installer())"
    )
    said: dict[str, list[str]] = {}
    for name, path in (("on path", f"{on_path}:/usr/bin:/bin"), ("none", "/usr/bin:/bin")):
        variables = {"PATH": path, "HOME": str(tmp_path), "PYTHONPATH": f"{shadow}:{REPO_ROOT}"}
        done = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, timeout=60, env=variables)
        assert done.returncode == 0, done.stderr
        said[name] = done.stdout.split()
    assert said["on path"] == [str(foreign), str(on_path / "uv"), "uv"], said
    assert said["none"] == [str(foreign), "None", "pip"], said
