"""The docker runner: replays a batch inside a sandboxed container of a replay image.

One container per batch (one torch import for every script). The sandbox is
the default and every relaxation is an explicit spec option:

    network    "none" (default) | "bridge" | any docker network name
    read_only  "true" (default) | "false"     root filesystem; /tmp is a tmpfs either way
    memory     "4g" (default)                 memory limit, no swap beyond it
    pids       "512" (default)                process/thread limit (stops fork bombs)
    cpus       the engine's CPU count (default)
    tmpfs      "2g" (default)                 size of /tmp, and of the runs' folders (each run's HOME, TMPDIR)
    timeout    seconds for the whole container; default: import allowance + the jobs' timeouts
    gpus       "all" | "N" | "none"           default "all" when spec.cuda names a CUDA tag
    env        NAME | NAME=VALUE (repeatable)  pass one host variable / set one; no other reaches a script
    python                                    interpreter inside a foreign spec.image (default python3)
    base_image, ca_bundle, build_network      image build inputs (casekit.runners.docker.images)

The batch folder is bind-mounted at /casekit/work read-only, its out/ writable
(results come back through it). Inside, the probe is root with the few
capabilities of PROBE_CAPABILITIES and nothing else; each run is an unprivileged
uid of its own with none (batch.UidIsolation: Docker's seccomp profile refuses
the user namespaces the bwrap sandbox gives each run): it can write only its run
folder, on a tmpfs of the container, and the shared /tmp and /dev/shm, which
are swept of its files when it ends; the batch's folders, the request and the
results are closed to it, and kill(-1) reaches only its own processes.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from casekit import settings
from casekit.errors import DockerUnavailable, RunnerError
from casekit.runners.batch import UidIsolation, lay_out_batch, read_batch, results_folder
from casekit.runners.docker import images
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn, Runner, TargetSpec, host_key
from casekit.runners.process import overall_timeout
from casekit.runners.sandbox import FAST_FORK_TUNABLE, env_items
from casekit.scrub import temp_prefix

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container
    from docker.models.images import Image

ROOT_IN_CONTAINER = "/casekit/work"
RUNS_IN_CONTAINER = f"{ROOT_IN_CONTAINER}/runs"  # the runs' folders: a tmpfs, not the host's disk
RUN_UIDS = UidIsolation().first_uid  # runs are uids from here up; the probe is root
# What the probe, root in the container, keeps of root's capabilities; a run has none of them.
PROBE_CAPABILITIES = (
    "SETUID",  # become the run's uid in each run's child
    "SETGID",  # its gid, and no supplementary group
    "CHOWN",  # give the run its copy of the job folder
    "KILL",  # kill a run's processes (another uid) at its end or timeout
    "DAC_OVERRIDE",  # read a run's results and remove what it left, whatever modes it set; write out/ on the host
    "FOWNER",  # remove a run's files inside a sticky folder it made (only an owner, or this, may)
)
RUN_LABEL = "casekit.run"
# On top of the host probe's allowance for the torch import: starting the container on a busy engine.
CONTAINER_START_S = 60.0
DEFAULTS = {"network": "none", "read_only": "true", "memory": "4g", "pids": "512", "tmpfs": "2g"}
LIST_OPTIONS = ("env",)  # keys that may be given more than once
KNOWN_OPTIONS = (
    set(DEFAULTS) | {"cpus", "timeout", "gpus", "python", "transfer"} | set(LIST_OPTIONS) | set(images.BUILD_OPTIONS)
)
# what --allow's help shows (the module docstring has every key)
ALLOW_EXAMPLES = (
    "network=bridge",
    "env=NAME[=VALUE]",
    "memory=8g",
    "pids=1024",
    "tmpfs=4g",
    "read_only=false",
    "gpus=all",
)
MAX_RESULTS_BYTES = 512 * 1024 * 1024  # what a batch may send back through the engine


def default_transfer(host: str | None = None) -> str:
    """'bind' for a local engine; 'copy' through the engine's API when the engine (`host`, else
    DOCKER_HOST) is elsewhere (tcp://, ssh://): a remote engine cannot see this machine's folders."""
    return "copy" if settings.docker_host_is_remote(host) else "bind"


class DockerRunner(Runner):
    """Runs the probe in a container of a casekit replay image (or spec.image)."""

    name = "docker"
    builds_envs = True
    pins_libraries = True
    runs_images = True
    sandbox_name = "docker"
    allow_options = frozenset(KNOWN_OPTIONS)
    allow_examples = ALLOW_EXAMPLES

    def __init__(self, spec: TargetSpec, client: docker.DockerClient | None = None) -> None:
        super().__init__(spec)
        given = {key: value for key, value in spec.options if key not in LIST_OPTIONS}
        self.options = {**DEFAULTS, "transfer": default_transfer(spec.host), **given}
        self.env = env_items(value for key, value in spec.options if key == "env")
        if self.options["transfer"] not in ("bind", "copy"):
            raise RunnerError(f"docker option transfer={self.options['transfer']!r}: use bind or copy")
        self._client = client
        self.image: Image | None = None
        self.last_run_id: str | None = None  # the casekit.run label of the latest container

    @classmethod
    def host(cls) -> str | None:
        """The engine DOCKER_HOST names, unless it is this machine's default socket: two engines with the
        same torch are two targets (their labels, shard cells and bisect cache keys differ)."""
        address = settings.docker_host()
        return None if address == settings.DEFAULT_DOCKER_HOST else address

    @classmethod
    def display_of(cls, spec: TargetSpec) -> str:
        """'docker:torch-2.13.0 on tcp://gpu-a:2376' for a target on another engine."""
        here = replace(spec, host=None)
        return cls.label_of(here) + (f" on {host_key(spec.host)}" if spec.host else "")

    @classmethod
    def replay_flags(cls, spec: TargetSpec, *, say_runner: bool = True) -> list[str]:
        flags = super().replay_flags(spec, say_runner=say_runner)
        return flags + (["--image", spec.image] if spec.image else [])

    @classmethod
    def free_build_bytes(cls) -> int | None:
        """Free bytes on the local engine's data root (where images are built); None for a remote or
        unreachable engine, whose disk this machine cannot see."""
        if settings.docker_host_is_remote():
            return None
        try:
            root = images.connect().info().get("DockerRootDir")
            return shutil.disk_usage(root).free if root else None
        except (DockerUnavailable, OSError):
            return None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = images.connect(self.spec.host)
        return self._client

    def prepare(self, progress: ProgressFn) -> None:
        """Find or build the image (spec.image when given)."""
        if self.image is None:
            self.image = images.ensure_image(self.spec, progress, self.client)

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """Run every job in one sandboxed container; the container is removed whatever happens."""
        self.prepare(progress)
        assert self.image is not None
        # ignore_cleanup_errors: out/ may hold folders root made in the container, which a host user cannot empty.
        with tempfile.TemporaryDirectory(prefix=temp_prefix("docker"), ignore_cleanup_errors=True) as folder:
            batch_dir = Path(folder) / "batch"  # made fresh: runs/ in it is where the runs' tmpfs is mounted
            lay_out_batch(batch_dir, jobs, ROOT_IN_CONTAINER, self.run_isolation(), self.scheduling)
            _close_to_runs(batch_dir)
            timeout = self._wall_timeout(jobs)
            progress(f"docker: sandbox: {self._sandbox_summary()}")
            # one blocking wait for the whole container: a phase, so a terminal shows its elapsed time
            progress(f"docker: {len(jobs)} script(s) in {self._image_name()}: importing torch, then running them …")
            log = self._run_container(batch_dir, timeout, progress)
            with results_folder(batch_dir, "out") as out:
                return read_batch(out, jobs, log)

    def run_isolation(self) -> UidIsolation | None:
        """What the probe does for each run: a uid of its own (None, the probe's uid, only in the tests'
        controls of what it stops)."""
        return UidIsolation()

    def describe(self) -> dict[str, object]:
        facts = super().describe()
        if self.image is not None:
            facts["image"] = self._image_name()
            facts["image_id"] = self.image.id
            facts["image_tags"] = list(self.image.tags)
            facts["image_labels"] = {k: v for k, v in (self.image.labels or {}).items() if k.startswith("casekit.")}
        facts["sandbox"] = self._sandbox_summary()
        return facts

    # ------------------------------------------------------------ internals

    def _run_container(self, batch_dir: Path, timeout: float, progress: ProgressFn) -> str:
        """Start the probe, wait at most `timeout` s, return its log; the container never outlives this."""
        import requests
        from docker.errors import APIError, DockerException

        run_id = uuid.uuid4().hex
        self.last_run_id = run_id
        container: Container | None = None
        volume = None
        note = ""
        copy = self.options["transfer"] == "copy"
        try:
            try:
                if copy:
                    volume = self.client.volumes.create(name=f"casekit-work-{run_id[:12]}", labels={RUN_LABEL: run_id})
                container = self.client.containers.create(**self._container_args(batch_dir, run_id, volume))
                if copy:
                    container.put_archive(ROOT_IN_CONTAINER, _batch_tar(batch_dir))
                container.start()
            except APIError as error:
                raise RunnerError(self._start_failure(error)) from None
            except (DockerException, requests.exceptions.ConnectionError) as error:
                raise DockerUnavailable(f"cannot reach the Docker engine: {images.first_line(error)}") from None
            try:
                outcome = container.wait(timeout=timeout)
                code = int(outcome.get("StatusCode", -1))
                if code == 137 and container.attrs.get("State", {}).get("OOMKilled"):
                    note = f"casekit: the container ran out of memory (limit {self.options['memory']}) and was killed"
                elif code not in (0,):
                    note = f"casekit: the probe exited with status {code}"
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                _kill(container)
                note = f"casekit: the container exceeded its {timeout:.0f} s wall-clock limit and was killed"
            if note:
                container.reload()
                if container.attrs.get("State", {}).get("OOMKilled"):
                    note = f"casekit: the container ran out of memory (limit {self.options['memory']}) and was killed"
                progress(note)
            log = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            if copy:
                chunks, _ = container.get_archive(f"{ROOT_IN_CONTAINER}/out")
                _extract_results(chunks, batch_dir)
            return log + ("\n" + note if note else "")
        finally:
            _remove(container, self._client, run_id)
            if volume is not None:
                try:
                    volume.remove(force=True)
                except Exception:  # noqa: BLE001 - best effort; labelled casekit.run for manual cleanup
                    pass

    def _container_args(self, batch_dir: Path, run_id: str, volume: Any = None) -> dict[str, Any]:
        import docker

        options = self.options
        if volume is not None:
            # Copied in as root-owned files, closed to the runs' uids (see _batch_tar).
            mounts = [docker.types.Mount(ROOT_IN_CONTAINER, volume.name, type="volume", read_only=False)]
        else:
            # Scripts and probe read-only; out/ (mounted over it) is the only writable host path, the probe's.
            mounts = [
                docker.types.Mount(ROOT_IN_CONTAINER, str(batch_dir), type="bind", read_only=True),
                docker.types.Mount(f"{ROOT_IN_CONTAINER}/out", str(batch_dir / "out"), type="bind", read_only=False),
            ]
        assert self.image is not None
        args: dict[str, Any] = {
            "image": self.image.id,
            "command": [self._python(), f"{ROOT_IN_CONTAINER}/probe.py", f"{ROOT_IN_CONTAINER}/request.json"],
            "name": f"casekit-probe-{run_id[:12]}",
            "labels": {RUN_LABEL: run_id, "casekit.role": "probe"},
            "working_dir": ROOT_IN_CONTAINER,
            "user": "0:0",  # the probe; each run drops to a uid of its own (see PROBE_CAPABILITIES)
            "environment": self._environment(),
            "mounts": mounts,
            "tmpfs": {
                "/tmp": f"rw,exec,nosuid,nodev,size={options['tmpfs']},mode=1777",
                # each run's folder is its uid's alone (0700); the runs cannot list the others'
                RUNS_IN_CONTAINER: f"rw,exec,nosuid,nodev,size={options['tmpfs']},mode=0711",
            },
            "read_only": _truthy(options["read_only"]),
            "network_mode": options["network"],
            "cap_drop": ["ALL"],
            "cap_add": list(PROBE_CAPABILITIES),
            "security_opt": ["no-new-privileges"],
            "mem_limit": options["memory"],
            "memswap_limit": options["memory"],
            "pids_limit": _positive_int(options["pids"], "pids"),
            "nano_cpus": int(self._cpus() * 1e9),
            # An init as PID 1 reaps what a script orphans; zombies would hold the pids limit.
            "init": True,
            "detach": True,
        }
        gpus = self._gpu_count()
        if gpus:
            args["device_requests"] = [docker.types.DeviceRequest(count=gpus, capabilities=[["gpu"]])]
        return args

    def _environment(self) -> dict[str, str]:
        """The container's variables (the image's ENV adds its own): fixed values, and the host's only where
        named with env=NAME; nothing else of the host's environment."""
        environment = {
            "HOME": "/tmp",  # each run's HOME and TMPDIR are in its own folder (the probe sets them)
            "TMPDIR": "/tmp",
            "USER": "casekit",
            "LOGNAME": "casekit",
            "XDG_CACHE_HOME": "/tmp/.cache",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "GLIBC_TUNABLES": FAST_FORK_TUNABLE,
        }
        for name, value in self.env:
            if value is not None:
                environment[name] = value
            elif name in os.environ:
                environment[name] = os.environ[name]
        return environment

    def _python(self) -> str:
        """Our images have the venv; a foreign image (spec.image) gets `python` option or python3."""
        if self.options.get("python"):
            return self.options["python"]
        if self.image is not None and "casekit.torch" in (self.image.labels or {}):
            return images.VENV_PYTHON
        if self.spec.python and self.spec.python.startswith("/"):
            return self.spec.python
        return "python3"

    def _gpu_count(self) -> int:
        """0 = no GPU request; -1 = all."""
        value = self.options.get("gpus")
        if value is None:
            return -1 if self.spec.cuda and self.spec.cuda != "cpu" else 0
        if value in ("all", "-1"):
            return -1
        if value in ("none", "0", ""):
            return 0
        return _positive_int(value, "gpus")

    def _cpus(self) -> float:
        available = float(self.client.info().get("NCPU") or os.cpu_count() or 1)
        if "cpus" not in self.options:
            return available
        try:
            wanted = float(self.options["cpus"])
        except ValueError:
            raise RunnerError(f"docker option cpus={self.options['cpus']!r} is not a number") from None
        return max(0.01, min(wanted, available))

    def _wall_timeout(self, jobs: list[ProbeJob]) -> float:
        if "timeout" in self.options:
            try:
                return float(self.options["timeout"])
            except ValueError:
                raise RunnerError(f"docker option timeout={self.options['timeout']!r} is not a number") from None
        return overall_timeout(jobs) + CONTAINER_START_S

    def _start_failure(self, error: Exception) -> str:
        text = images.first_line(getattr(error, "explanation", None) or error)
        if "device driver" in text or ("capabilities" in text and "gpu" in text):
            return (
                "the Docker engine has no GPU runtime (install nvidia-container-toolkit), "
                f"so this CUDA target cannot get a GPU; pass the option gpus=none to run it on CPU ({text})"
            )
        return f"the replay container could not start: {text}"

    def _image_name(self) -> str:
        assert self.image is not None
        return self.spec.image or (self.image.tags[0] if self.image.tags else self.image.short_id)

    def _sandbox_summary(self) -> str:
        options = self.options
        parts = [
            f"network={options['network']}",
            f"read_only={options['read_only']}",
            f"memory={options['memory']}",
            f"pids={options['pids']}",
            f"probe=root(+{','.join(PROBE_CAPABILITIES).lower()})",
            f"runs=uid>={RUN_UIDS}(no capabilities, own folder, /tmp swept)",
        ]
        if self._gpu_count():
            parts.append(f"gpus={options.get('gpus', 'all')}")
        parts += [f"env={name}" for name, _ in self.env]
        return " ".join(parts)


# Modes of the batch as the container sees it: the probe (root) reads and writes, a run's uid passes
# through the batch folder to its own run folder and sees nothing else of it.
BATCH_MODES = {"": 0o711, "jobs": 0o700, "out": 0o700, "runs": 0o711, "request.json": 0o600, "probe.py": 0o600}


def _close_to_runs(batch_dir: Path) -> None:
    """The host's batch folder for the bind mount: what casekit laid out, readable only by the probe (root
    there: the owner, or past the modes with DAC_OVERRIDE when casekit runs as another user)."""
    for name, mode in BATCH_MODES.items():
        if (batch_dir / name).exists():
            os.chmod(batch_dir / name, mode)


def _batch_tar(batch_dir: Path) -> bytes:
    """The batch as a tar owned by root, with the modes of the bind mount (BATCH_MODES)."""

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if info.name in BATCH_MODES:
            info.mode = BATCH_MODES[info.name]
        elif info.isdir():
            info.mode = 0o755
        else:
            info.mode = 0o644
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(batch_dir.iterdir()):
            tar.add(path, arcname=path.name, filter=owned_by_root)
    return buffer.getvalue()


def _extract_results(chunks: Any, batch_dir: Path) -> None:
    """Unpack out/ as the engine sends it, refusing anything but plain files under out/."""
    buffer = io.BytesIO()
    for chunk in chunks:
        buffer.write(chunk)
        if buffer.tell() > MAX_RESULTS_BYTES:
            raise RunnerError(f"the container sent back more than {MAX_RESULTS_BYTES >> 20} MiB of results")
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not parts or parts[0] != "out" or ".." in parts or member.name.startswith("/"):
                continue
            if member.isdir():
                (batch_dir / member.name).mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                source = tar.extractfile(member)
                if source is not None:
                    target = batch_dir / member.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(source.read())


def _kill(container: Container) -> None:
    try:
        container.kill()
    except Exception:  # noqa: BLE001 - it may have exited on its own meanwhile
        pass


def _remove(container: Container | None, client: docker.DockerClient | None, run_id: str) -> None:
    """Force-remove, even after Ctrl-C or a timeout; a failure here must not hide the real error."""
    try:
        if container is not None:
            container.remove(force=True)
        elif client is not None:  # interrupted between create and our handle on it
            for leftover in client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
                leftover.remove(force=True)
    except Exception:  # noqa: BLE001 - best effort; the casekit.run label lets `docker rm` find leftovers
        pass


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("false", "0", "no", "off")


def _positive_int(value: str, option: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise RunnerError(f"docker option {option}={value!r} is not a whole number") from None
    if number <= 0:
        raise RunnerError(f"docker option {option}={value!r} must be positive")
    return number
