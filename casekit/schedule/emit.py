"""Job files for the engines teams run, from a shard plan: one emitter per engine, each a template.

Every emitter is pure (plan + `JobSetup` in, the file's text out) and fills a
template shipped in `casekit/schedule/templates/`. The jobs they write run the
same `replay --shard-from-env --results-dir` and `merge` commands, so what a
scheduler adds is only how it numbers its tasks and how it retries them:

- slurm: a batch script that submits itself as an array of N tasks plus a merge
  job after it (`--dependency=afterany`), and resubmits one task by its index;
- k8s: one Indexed Job per target, in that target's replay image, with
  `backoffLimitPerIndex`, results on a shared volume, and a merge Job that waits
  for them;
- gha: a workflow whose matrix is the shards, then a merge job.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import unicodedata
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

from casekit.errors import CasekitError
from casekit.replay.plan import TargetChoice
from casekit.runners import registry
from casekit.runners.docker.images import VENV_PYTHON, VENV_ROOT
from casekit.runners.docker.job_image import job_image_name
from casekit.runners.interface import TargetSpec
from casekit.schedule.plan import Schedule

PLACEHOLDER = re.compile(r"@@([a-z_]+)@@")
K8S_TARGETS = "/casekit/targets"  # an emptyDir in each pod: the target's venv under a name of its own
K8S_ARCHIVE = "/casekit/archive"
K8S_RESULTS = "/casekit/results"
DEFAULT_KUBECTL_IMAGE = "bitnami/kubectl:1.31"
# Slurm's --time for an array task: the plan's dearest shard, twice over (the recorded run times come
# from another machine, under other load), plus what a task pays before its first run (building a
# managed env: a first download of torch, an install); rounded up to whole minutes.
SLURM_TIME_MARGIN = 2.0
SLURM_SETUP_S = 1800.0
SLURM_MERGE_TIME = "00:20:00"  # the merge reads result files: seconds, even for thousands of shards


@dataclass(frozen=True)
class JobSetup:
    """How the emitted jobs reach casekit, the archive and the shared results, and engine knobs."""

    archive: str = "cases"  # as the jobs see it (Slurm, GitHub); a subPath of the claim (k8s)
    results: str = "results"
    casekit: tuple[str, ...] = ("casekit",)  # the command that runs casekit in a job
    environment: tuple[tuple[str, str], ...] = ()  # exported before it runs (Slurm): PYTHONPATH for a checkout
    name: str = "casekit-replay"
    fail_on: str = "error"  # the merge's --fail-on
    file: str = ""  # the emitted file's name, as its comments tell how to run it
    sbatch: tuple[str, ...] = ()  # extra `#SBATCH` options, e.g. --gres=gpu:1 --time=02:00:00
    registry: str = ""  # k8s: the prefix of the replay images, e.g. registry.example.com/team/
    claim: str = "casekit"  # k8s: the PersistentVolumeClaim holding the archive and the results
    retries: int = 2  # k8s: backoffLimitPerIndex
    kubectl_image: str = DEFAULT_KUBECTL_IMAGE
    runs_on: str = "ubuntu-latest"  # GitHub: the runner label (a GPU runner's when cases need CUDA)


class Emitter(Protocol):
    """One engine's job file."""

    name: str
    default_file: str

    def emit(self, plan: Schedule, choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> str:
        """The file's text for this plan; `choice` and `case_ids` are the replay options it was made for."""
        ...

    def steps(self, plan: Schedule, setup: JobSetup) -> list[str]:
        """What to do with the file once written, in order, one line each (the exact commands)."""
        ...


def fill(template: str, **values: str) -> str:
    """A template from casekit/schedule/templates with every @@name@@ replaced; a name the template
    lacks, or one it has that was not given, is a programming error, raised here."""
    text = resources.files("casekit.schedule").joinpath("templates", template).read_text(encoding="utf-8")
    wanted = set(PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise ValueError(f"{template}: placeholders {sorted(wanted)} but values for {sorted(values)}")
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], text)


# ------------------------------------------------------------------ values as data in each file's language
#
# Every user value reaches a job file through one of the quoting functions below, each for the
# language of the place it lands in (bash, an #SBATCH line, YAML); none is ever pasted raw. A value
# that no quoting can keep on its line (a control character) is refused with one line.

# Categories no job file can hold as data: controls (newline, NEL), format characters (bidi
# overrides that make a file read unlike it runs), YAML's line and paragraph separators, surrogates.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
ACTIONS_EXPRESSION = "${{"  # GitHub evaluates it in `run:` and `env:` alike, quoted or not
# The JobSetup fields and the option (or source) each comes from, for the one-line refusal;
# tests/security/test_job_files.py checks every field is named here.
SETUP_OPTIONS = {
    "archive": "--archive",
    "results": "--results-dir",
    "casekit": "--casekit",
    "environment": "the checkout's PYTHONPATH",
    "name": "--job-name",
    "fail_on": "--fail-on",
    "file": "--out",
    "sbatch": "--sbatch",
    "registry": "--registry",
    "claim": "--claim",
    "retries": "retries",
    "kubectl_image": "the kubectl image",
    "runs_on": "runs-on",
}
_NOT_ASCII = re.compile("[^\x00-\x7e]")
_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


class JobValueError(CasekitError):
    """A value that cannot go into a job file as data (a control character; `${{` in a workflow)."""


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


def user_values(choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> list[tuple[str, str]]:
    """(option, value) for every user value a job file can hold: the replay flags and the setup's fields."""
    flags = replay_flags(choice, case_ids)
    values = list(zip(flags[::2], flags[1::2], strict=True))
    for spec in dataclasses.fields(setup):
        given = getattr(setup, spec.name)
        items = given if isinstance(given, tuple) else (given,)
        for item in items:
            for text in item if isinstance(item, tuple) else (item,):  # environment: (name, value) pairs
                values.append((SETUP_OPTIONS[spec.name], str(text)))
    return values


def check_values(values: list[tuple[str, str]], engine: str) -> None:
    """JobValueError, in one line naming the option, for a value no quoting can keep as data."""
    for option, value in values:
        for char in value:
            if unicodedata.category(char) in UNSAFE_CATEGORIES:
                raise JobValueError(
                    f"{option} {_shown(value)}: a control character (U+{ord(char):04X}) cannot go into a job "
                    "file; give the value on one line, without control characters"
                )
        if engine == "gha" and ACTIONS_EXPRESSION in value:
            raise JobValueError(
                f"{option} {_shown(value)}: GitHub Actions would evaluate '{ACTIONS_EXPRESSION}' in the workflow "
                "(secrets, contexts); casekit writes no expression from a value"
            )


def shell_word(value: str) -> str:
    """`value` as one bash word that expands to itself."""
    return shlex.quote(value)


def sbatch_word(value: str) -> str:
    """`value` as one argument of an #SBATCH line: sbatch reads those itself, not bash, and knows only
    double quotes and backslashes (a bare '#' there starts a comment, a space ends the argument)."""
    if _SBATCH_PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def yaml_value(value: object) -> str:
    """A YAML scalar or flow collection of `value`: JSON (which YAML reads), so nothing is left to a plain
    scalar's rules, in ASCII: YAML's own escapes for the rest (NEL and U+2028 would end a YAML line,
    and JSON's surrogate pairs come back from YAML as two halves)."""
    return _yaml_text(value)


def _yaml_text(value: object) -> str:
    return _NOT_ASCII.sub(_yaml_escape, json.dumps(value, ensure_ascii=False))


def _yaml_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def yaml_comment(value: str) -> str:
    """`value` for a YAML comment: as it reads, with anything that would end the line escaped."""
    return _yaml_text(value)[1:-1]


def replay_flags(choice: TargetChoice, case_ids: tuple[str, ...] = ()) -> list[str]:
    """The replay options that make a job cut the same matrix the plan did: the targets and the cases."""
    flags: list[str] = []
    for python in choice.pythons:
        flags += ["--python", python]
    for torch in choice.torches:
        flags += ["--torch", torch]
    for option, value in (
        ("--runner", choice.runner),
        ("--cuda", choice.cuda),
        ("--index-url", choice.index_url),
        ("--find-links", choice.find_links),
        ("--image", choice.image),
        ("--base-image", choice.base_image),
    ):
        if value:
            flags += [option, value]
    for item in choice.allow:
        flags += ["--allow", item]
    for option, items in (
        ("--dynamo", choice.dynamo),
        ("--package", choice.packages),
        ("--vary-dynamo", choice.vary_dynamo),
        ("--vary-package", choice.vary_packages),
    ):
        for item in items:
            flags += [option, item]
    for case_id in case_ids:
        flags += ["--case", case_id]
    return flags


def _summary(plan: Schedule) -> str:
    return (
        f"{len(plan.case_ids)} case(s) x {len(plan.specs)} target(s) in {plan.count} shard(s); "
        f"estimated max {plan.max_s:.0f} s, mean {plan.mean_s:.0f} s per shard (max/mean {plan.balance:.2f})"
    )


def slurm_time(seconds: float) -> str:
    """Seconds as Slurm's --time reads them, rounded up to a whole minute: 'HH:MM:00', or 'D-HH:MM:00'."""
    minutes = max(1, math.ceil(seconds / 60))
    days, minutes = divmod(minutes, 24 * 60)
    clock = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


def task_time_limit(plan: Schedule) -> float:
    """The seconds an array task may take: the dearest shard with its margin, and the set-up."""
    return plan.max_s * SLURM_TIME_MARGIN + SLURM_SETUP_S


def _sets_time(option: str) -> bool:
    """Whether an --sbatch option is Slurm's time limit ('--time=2:00:00', '--time 60', '-t 60', '-t60')."""
    flag = option.split("=", 1)[0].split(None, 1)[0] if option.strip() else ""
    return flag == "--time" or flag.startswith("-t") and not flag.startswith("--")


class SlurmEmitter:
    """A Slurm batch script: the array, the merge job after it (afterany), a resubmit by index."""

    name = "slurm"
    default_file = "casekit-replay.sbatch"

    def emit(self, plan: Schedule, choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> str:
        check_values(user_values(choice, case_ids, setup), self.name)
        logs = f"{setup.results}/logs"
        options = list(setup.sbatch)
        if any(_sets_time(option) for option in options):
            time_note = "--time: as given with --sbatch"
        else:
            limit = slurm_time(task_time_limit(plan))
            options.insert(0, f"--time={limit}")
            time_note = (
                f"--time={limit}: the dearest shard's estimate ({plan.max_s:.0f} s) x{SLURM_TIME_MARGIN:g}, plus "
                f"{SLURM_SETUP_S / 60:.0f} min to build its env; --sbatch --time=... sets another"
            )
        environment = "\n".join(
            f'export {name}={shell_word(value)}"${{{name}:+:${name}}}"'
            if name == "PYTHONPATH"
            else f"export {name}={shell_word(value)}"
            for name, value in setup.environment
        )
        return fill(
            "slurm.sbatch",
            summary=_summary(plan),
            file=shell_word(setup.file or self.default_file),
            sbatch_name=sbatch_word(setup.name),
            # '%' starts a Slurm file-name pattern (%x, %A): a folder's own '%' is written '%%'
            sbatch_output=sbatch_word(f"{logs.replace('%', '%%')}/%x-%A_%a.out"),
            merge_name=shell_word(f"{setup.name}-merge"),
            merge_output=shell_word(f"{logs.replace('%', '%%')}/%x-%j.out"),
            merge_time=SLURM_MERGE_TIME,
            time_note=time_note,
            logs=shell_word(logs),
            sbatch="\n".join(f"#SBATCH {sbatch_word(option)}" for option in options),
            shards=str(plan.count),
            environment=environment,
            casekit=shlex.join(setup.casekit),
            archive=shell_word(setup.archive),
            results=shell_word(setup.results),
            flags=shlex.join(replay_flags(choice, case_ids)),
            fail_on=shell_word(setup.fail_on),
        )

    def steps(self, plan: Schedule, setup: JobSetup) -> list[str]:
        return [
            f"bash {shell_word(setup.file or self.default_file)}   (submits {plan.count} array task(s), then the merge)"
        ]


def _dns_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 label (Kubernetes object names): lower case, digits and '-', at most `limit` long."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:limit].rstrip("-") or "x"


def target_image(spec: TargetSpec, image_registry: str = "") -> str:
    """The image a target's pods run: its --image, else casekit's job image for it (the replay image with
    casekit in it, `casekit images build --registry`), under `image_registry`."""
    if spec.image:
        return spec.image
    if registry.takes_interpreters(spec.runner):
        raise CasekitError(
            f"--emit k8s runs each target in an image; {registry.label(spec)} is an interpreter on this machine: "
            "give targets as --torch VERSION (casekit's replay images) or --image IMAGE"
        )
    return job_image_name(spec, image_registry)


def image_build_command(spec: TargetSpec, image_registry: str) -> list[str] | None:
    """The `casekit images build ... --registry R --push` that makes and pushes a target's job image under
    the name `target_image` gives; None for an --image of the user's own (it must have casekit on PATH)."""
    if spec.image:
        return None
    command = ["casekit", "images", "build", "--torch", spec.torch or "latest"]
    for option, value in (("--cuda", spec.cuda), ("--index-url", spec.index_url)):
        if value:
            command += [option, value]
    base = dict(spec.options).get("base_image")
    if base:
        command += ["--base-image", base]
    return [*command, "--registry", image_registry, "--push"]


def _k8s_steps(plan: Schedule, setup: JobSetup, file: str, name: str) -> list[str]:
    """Every step a manifest needs before and after `kubectl apply`, with the exact commands."""
    builds, own = [], []
    for spec in plan.specs:
        command = image_build_command(spec, setup.registry)
        if command is not None:
            builds.append("   " + shlex.join(command))
        else:
            own.append(f"   {spec.image}: your image; it must have casekit on PATH and {VENV_PYTHON}")
    registry_note = "" if setup.registry else " (no --registry: the names are local, and a cluster rarely sees them)"
    return [
        f"1. a PersistentVolumeClaim {setup.claim!r} every pod here can mount (ReadWriteMany), holding the archive's "
        f"bundles at {setup.archive + '/'!r} (kubectl cp them in through a pod that mounts it) and room for "
        f"{setup.results + '/'!r}",
        f"2. each target's image, casekit in it, pushed where the pods pull it{registry_note} (`docker login` first):",
        *builds,
        *own,
        f"3. kubectl apply -f {shell_word(file)}",
        f"4. kubectl logs -f job/{name}-merge   (the merged verdicts; {setup.results}/merged.json on the claim)",
    ]


def pod_venv(spec: TargetSpec) -> str:
    """Where a target's pods show the image's venv under the target's own name (a link to the venv's folder:
    a link to its python alone would be no venv, since Python finds pyvenv.cfg beside the path it is run by),
    so each target keeps a label of its own when the results of all the images are merged."""
    return f"{K8S_TARGETS}/{_dns_name(registry.label(spec).replace(':', '-'), 40)}"


def pod_target(spec: TargetSpec) -> str:
    """The interpreter path a target's pods name: the python of `pod_venv`."""
    return f"{pod_venv(spec)}/bin/python"


def _job_document(spec: TargetSpec, shards: int, job: str, labels: str, command: str, setup: JobSetup) -> str:
    """One target's Indexed Job: `shards` completions of `command` in the target's image."""
    image = target_image(spec, setup.registry)
    resources_block = ""
    if spec.cuda:  # a CUDA target asks the device plugin for a GPU
        resources_block = '          resources:\n            limits: {"nvidia.com/gpu": "1"}\n'
    return fill(
        "k8s-job.yaml",
        label=yaml_comment(registry.label(spec)),
        shards=str(shards),
        last=str(shards - 1),
        image=yaml_value(image),
        image_note=yaml_comment(image),
        job=job,
        labels=labels,
        retries=str(setup.retries),
        command=yaml_value(command),
        resources=resources_block,
        archive=yaml_value(setup.archive),
        results=yaml_value(setup.results),
        claim=yaml_value(setup.claim),
    )


class KubernetesEmitter:
    """Indexed Jobs, one per target image, results on a shared volume, and a merge Job that waits for them."""

    name = "k8s"
    default_file = "casekit-replay.k8s.yaml"

    def emit(self, plan: Schedule, choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> str:
        check_values(user_values(choice, case_ids, setup), self.name)
        labels = yaml_value({"app.kubernetes.io/name": "casekit", "casekit/plan": _dns_name(setup.name)})
        name = _dns_name(setup.name, 40)
        casekit = shlex.join(setup.casekit)
        allow = [item for item in choice.allow if not item.startswith("sandbox=")]
        steps = _k8s_steps(plan, setup, setup.file or self.default_file, name)
        documents = [
            fill(
                "k8s-rbac.yaml",
                summary=_summary(plan),
                name=name,
                labels=labels,
                claim=yaml_comment(setup.claim),
                results=yaml_comment(setup.results),
                archive=yaml_comment(setup.archive),
                steps="\n".join(f"#   {yaml_comment(step)}" for step in steps),
            )
        ]
        jobs, expected = [], []
        for spec in plan.specs:
            shards = len(plan.shards_of(registry.label(spec)))
            if not shards:
                continue
            job = _dns_name(f"{name}-{registry.label(spec).replace(':', '-')}")
            target = pod_target(spec)
            flags = ["--python", target, "--allow", "sandbox=none"]
            for item in allow:
                flags += ["--allow", item]
            for case_id in case_ids:
                flags += ["--case", case_id]
            command = (
                f"ln -sfn {VENV_ROOT} {pod_venv(spec)} && exec {casekit} replay --archive {K8S_ARCHIVE} "
                f"{shlex.join(flags)} --shard-from-env --results-dir {K8S_RESULTS} --no-record --fail-on never"
            )
            documents.append(_job_document(spec, shards, job, labels, command, setup))
            jobs.append(job)
            expected.append(registry.label(registry.interpreter_target(target)))  # what the pod records
        if not jobs:
            raise CasekitError("nothing to emit: the plan has no shard with a cell to run")
        wait = (
            f'for job in {" ".join(jobs)}; do until kubectl get job "$job" '
            "-o jsonpath='{.status.conditions[*].type}' | grep -Eq 'Complete|Failed'; do sleep 20; done; done"
        )
        merge = (
            f"exec {casekit} merge {K8S_RESULTS} "
            + " ".join(f"--expect-target {shlex.quote(label)}" for label in expected)
            + f" --json {K8S_RESULTS}/merged.json --fail-on {shell_word(setup.fail_on)}"
        )
        documents.append(
            fill(
                "k8s-merge.yaml",
                name=name,
                labels=labels,
                kubectl_image=yaml_value(setup.kubectl_image),
                wait=yaml_value(wait),
                image=yaml_value(target_image(plan.specs[0], setup.registry)),
                command=yaml_value(merge),
                results=yaml_value(setup.results),
                claim=yaml_value(setup.claim),
            )
        )
        return "".join(documents)

    def steps(self, plan: Schedule, setup: JobSetup) -> list[str]:
        return _k8s_steps(plan, setup, setup.file or self.default_file, _dns_name(setup.name, 40))


class GitHubEmitter:
    """A workflow: one matrix job per shard (strategy.job-index / job-total), then the merge."""

    name = "gha"
    default_file = "casekit-replay.yml"

    def emit(self, plan: Schedule, choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> str:
        check_values(user_values(choice, case_ids, setup), self.name)
        return fill(
            "gha.yml",
            summary=_summary(plan),
            archive=yaml_value(setup.archive),
            runs_on=yaml_value(setup.runs_on),
            indexes=", ".join(str(index) for index in range(plan.count)),
            flags=shlex.join(replay_flags(choice, case_ids)),
            fail_on=shell_word(setup.fail_on),
        )

    def steps(self, plan: Schedule, setup: JobSetup) -> list[str]:
        file = setup.file or self.default_file
        return [
            f"commit {file} under .github/workflows/ and set CASEKIT_SPEC in it to where your team gets casekit",
            f"run it from the Actions tab (workflow_dispatch) or wait for its schedule: {plan.count} shard job(s)",
        ]


EMITTERS: dict[str, Emitter] = {
    emitter.name: emitter for emitter in (SlurmEmitter(), KubernetesEmitter(), GitHubEmitter())
}


def get_emitter(name: str) -> Emitter:
    """The emitter for --emit NAME; one clear line for an unknown one."""
    try:
        return EMITTERS[name]
    except KeyError:
        raise CasekitError(f"--emit takes one of {', '.join(EMITTERS)}, not {name!r}") from None
