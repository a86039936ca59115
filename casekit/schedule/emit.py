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

import json
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

from casekit.errors import CasekitError
from casekit.replay.plan import TargetChoice
from casekit.runners import registry
from casekit.runners.docker.images import DEFAULT_BASE_IMAGE, DEFAULT_PYTHON, VENV_PYTHON, ImageRecipe
from casekit.runners.interface import TargetSpec
from casekit.schedule.plan import Schedule

PLACEHOLDER = re.compile(r"@@([a-z_]+)@@")
K8S_TARGETS = "/casekit/targets"  # an emptyDir in each pod: the target's interpreter under a name of its own
K8S_ARCHIVE = "/casekit/archive"
K8S_RESULTS = "/casekit/results"
DEFAULT_KUBECTL_IMAGE = "bitnami/kubectl:1.31"


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


def fill(template: str, **values: str) -> str:
    """A template from casekit/schedule/templates with every @@name@@ replaced; a name the template
    lacks, or one it has that was not given, is a programming error, raised here."""
    text = resources.files("casekit.schedule").joinpath("templates", template).read_text(encoding="utf-8")
    wanted = set(PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise ValueError(f"{template}: placeholders {sorted(wanted)} but values for {sorted(values)}")
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], text)


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
    for case_id in case_ids:
        flags += ["--case", case_id]
    return flags


def _summary(plan: Schedule) -> str:
    return (
        f"{len(plan.case_ids)} case(s) x {len(plan.specs)} target(s) in {plan.count} shard(s); "
        f"estimated max {plan.max_s:.0f} s, mean {plan.mean_s:.0f} s per shard (max/mean {plan.balance:.2f})"
    )


class SlurmEmitter:
    """A Slurm batch script: the array, the merge job after it (afterany), a resubmit by index."""

    name = "slurm"
    default_file = "casekit-replay.sbatch"

    def emit(self, plan: Schedule, choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> str:
        logs = f"{setup.results}/logs"
        environment = "\n".join(
            f'export {name}={shlex.quote(value)}"${{{name}:+:${name}}}"'
            if name == "PYTHONPATH"
            else f"export {name}={shlex.quote(value)}"
            for name, value in setup.environment
        )
        return fill(
            "slurm.sbatch",
            summary=_summary(plan),
            file=setup.file or self.default_file,
            name=setup.name,
            logs=shlex.quote(logs),
            sbatch="\n".join(f"#SBATCH {option}" for option in setup.sbatch),
            shards=str(plan.count),
            environment=environment,
            casekit=shlex.join(setup.casekit),
            archive=shlex.quote(setup.archive),
            results=shlex.quote(setup.results),
            flags=shlex.join(replay_flags(choice, case_ids)),
            fail_on=setup.fail_on,
        )


def _dns_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 label (Kubernetes object names): lower case, digits and '-', at most `limit` long."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:limit].rstrip("-") or "x"


def target_image(spec: TargetSpec, image_registry: str = "") -> str:
    """The image a target's pods run: its --image, else casekit's replay image for it (`casekit images`)."""
    if spec.image:
        return spec.image
    if registry.takes_interpreters(spec.runner):
        raise CasekitError(
            f"--emit k8s runs each target in an image; {registry.label(spec)} is an interpreter on this machine: "
            "give targets as --torch VERSION (casekit's replay images) or --image IMAGE"
        )
    base = dict(spec.options).get("base_image") or DEFAULT_BASE_IMAGE.format(python=DEFAULT_PYTHON)
    recipe = ImageRecipe(torch=spec.torch, cuda=spec.cuda or "cpu", python=DEFAULT_PYTHON, base_image=base)
    return image_registry + recipe.tag


def pod_target(spec: TargetSpec) -> str:
    """The interpreter path a target's pods name: the image's venv python under the target's own name,
    so each target keeps a label of its own when the results of all the images are merged."""
    return f"{K8S_TARGETS}/{_dns_name(registry.label(spec).replace(':', '-'), 40)}"


def _yaml(value: object) -> str:
    """A YAML scalar or flow collection (JSON is YAML): no quoting left to chance."""
    return json.dumps(value)


class KubernetesEmitter:
    """Indexed Jobs, one per target image, results on a shared volume, and a merge Job that waits for them."""

    name = "k8s"
    default_file = "casekit-replay.k8s.yaml"

    def emit(self, plan: Schedule, choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> str:
        labels = _yaml({"app.kubernetes.io/name": "casekit", "casekit/plan": _dns_name(setup.name)})
        name = _dns_name(setup.name, 40)
        casekit = shlex.join(setup.casekit)
        allow = [item for item in choice.allow if not item.startswith("sandbox=")]
        documents = [
            fill(
                "k8s-rbac.yaml",
                summary=_summary(plan),
                file=setup.file or self.default_file,
                name=name,
                labels=labels,
                claim=setup.claim,
                results=setup.results,
                archive=setup.archive,
                registry_hint=f"{setup.registry or ''}casekit-replay:TAG",
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
                f"ln -sfn {VENV_PYTHON} {target} && exec {casekit} replay --archive {K8S_ARCHIVE} "
                f"{shlex.join(flags)} --shard-from-env --results-dir {K8S_RESULTS} --no-record --fail-on never"
            )
            resources_block = ""
            if spec.cuda:  # a CUDA target asks the device plugin for a GPU
                resources_block = '          resources:\n            limits: {"nvidia.com/gpu": "1"}\n'
            documents.append(
                fill(
                    "k8s-job.yaml",
                    label=registry.label(spec),
                    shards=str(shards),
                    last=str(shards - 1),
                    image=target_image(spec, setup.registry),
                    job=job,
                    labels=labels,
                    retries=str(setup.retries),
                    command=_yaml(command),
                    resources=resources_block,
                    archive=setup.archive,
                    results=setup.results,
                    claim=setup.claim,
                )
            )
            jobs.append(job)
            expected.append(f"python:{target}")
        if not jobs:
            raise CasekitError("nothing to emit: the plan has no shard with a cell to run")
        wait = (
            f'for job in {" ".join(jobs)}; do until kubectl get job "$job" '
            "-o jsonpath='{.status.conditions[*].type}' | grep -Eq 'Complete|Failed'; do sleep 20; done; done"
        )
        merge = (
            f"exec {casekit} merge {K8S_RESULTS} "
            + " ".join(f"--expect-target {shlex.quote(label)}" for label in expected)
            + f" --json {K8S_RESULTS}/merged.json --fail-on {setup.fail_on}"
        )
        documents.append(
            fill(
                "k8s-merge.yaml",
                name=name,
                labels=labels,
                kubectl_image=setup.kubectl_image,
                wait=_yaml(wait),
                image=target_image(plan.specs[0], setup.registry),
                command=_yaml(merge),
                results=setup.results,
                claim=setup.claim,
            )
        )
        return "".join(documents)


class GitHubEmitter:
    """A workflow: one matrix job per shard (strategy.job-index / job-total), then the merge."""

    name = "gha"
    default_file = "casekit-replay.yml"

    def emit(self, plan: Schedule, choice: TargetChoice, case_ids: tuple[str, ...], setup: JobSetup) -> str:
        return fill(
            "gha.yml",
            summary=_summary(plan),
            archive=_yaml(setup.archive),
            runs_on=setup.runs_on,
            indexes=", ".join(str(index) for index in range(plan.count)),
            flags=shlex.join(replay_flags(choice, case_ids)),
            fail_on=setup.fail_on,
        )


EMITTERS: dict[str, Emitter] = {
    emitter.name: emitter for emitter in (SlurmEmitter(), KubernetesEmitter(), GitHubEmitter())
}


def get_emitter(name: str) -> Emitter:
    """The emitter for --emit NAME; one clear line for an unknown one."""
    try:
        return EMITTERS[name]
    except KeyError:
        raise CasekitError(f"--emit takes one of {', '.join(EMITTERS)}, not {name!r}") from None
