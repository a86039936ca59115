"""The shard a scheduler's array task is: `replay --shard-from-env`, a pure function of the environment.

Each scheduler numbers its tasks in its own variables. Every one here is read as a
0-based index plus a count, then turned into casekit's 1-based `K/N`:

- Slurm job arrays: SLURM_ARRAY_TASK_ID, with SLURM_ARRAY_TASK_COUNT, or
  SLURM_ARRAY_TASK_MIN/MAX (the index is the task id minus MIN). With
  CASEKIT_SHARD_COUNT set (casekit's emitted scripts set it) the task id *is* the
  index and the array's own count is not read: `sbatch --array=3` resubmits shard
  4/N in an array of one task.
- Kubernetes Indexed Jobs: JOB_COMPLETION_INDEX; the pod is not told the job's
  completions, so the manifest passes them as CASEKIT_SHARD_COUNT.
- GitHub Actions matrices, and anything else: CASEKIT_SHARD_INDEX and
  CASEKIT_SHARD_COUNT (the emitted workflow sets them from `strategy.job-index`
  and `strategy.job-total`).
- Buildkite: BUILDKITE_PARALLEL_JOB and BUILDKITE_PARALLEL_JOB_COUNT.
- GitLab CI: CI_NODE_INDEX (1-based) and CI_NODE_TOTAL.

An index out of range, a missing count, or two schedulers whose variables name
different shards are each one ShardError line naming the variables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from casekit.replay.shard import ShardError, check_shard_count, whole_number

SHARD_COUNT = "CASEKIT_SHARD_COUNT"
SHARD_INDEX = "CASEKIT_SHARD_INDEX"
LOOKED_FOR = (
    "SLURM_ARRAY_TASK_ID",
    "JOB_COMPLETION_INDEX",
    SHARD_INDEX,
    "BUILDKITE_PARALLEL_JOB",
    "CI_NODE_INDEX",
)


@dataclass(frozen=True)
class EnvShard:
    """Shard K of N (1-based), and the scheduler variables it was read from, in one line."""

    k: int
    n: int
    source: str

    @property
    def text(self) -> str:
        return f"{self.k}/{self.n}"


def _number(environ: Mapping[str, str], name: str) -> int | None:
    """The whole number a variable holds; None when unset; ShardError when it holds anything else."""
    if name not in environ:
        return None
    number = whole_number(environ[name].strip())
    if number is None:  # ASCII digits only: '²' passes str.isdigit, then int() raises
        raise ShardError(f"--shard-from-env: {name}={environ[name][:40]!r} is not a whole number")
    return number


def _shard(index: int, count: int, index_text: str, count_text: str, scheduler: str) -> EnvShard:
    """A 0-based index and a count, checked, as shard index+1 of count."""
    if count < 1:
        raise ShardError(f"--shard-from-env: {count_text} gives {count} shards; it must be at least 1")
    check_shard_count(count, f"--shard-from-env: {count_text}")
    if not 0 <= index < count:
        raise ShardError(
            f"--shard-from-env: {index_text} is out of range for {count} shards ({count_text}): "
            f"the index runs from 0 to {count - 1}"
        )
    return EnvShard(index + 1, count, f"{scheduler}: {index_text}, {count_text}")


def _explicit_count(environ: Mapping[str, str]) -> tuple[int, str] | None:
    count = _number(environ, SHARD_COUNT)
    return None if count is None else (count, f"{SHARD_COUNT}={count}")


def _slurm(environ: Mapping[str, str]) -> EnvShard | None:
    task = _number(environ, "SLURM_ARRAY_TASK_ID")
    if task is None:
        return None
    task_text = f"SLURM_ARRAY_TASK_ID={task}"
    explicit = _explicit_count(environ)
    if explicit is not None:  # casekit's own scripts: the task id is the index, whatever array it runs in
        return _shard(task, explicit[0], task_text, explicit[1], "slurm")
    count = _number(environ, "SLURM_ARRAY_TASK_COUNT")
    low, high = _number(environ, "SLURM_ARRAY_TASK_MIN"), _number(environ, "SLURM_ARRAY_TASK_MAX")
    span = high - (low or 0) + 1 if high is not None else None
    if count is None and span is None:
        raise ShardError(
            f"--shard-from-env: {task_text} is set but not the array's size: neither SLURM_ARRAY_TASK_COUNT "
            f"nor SLURM_ARRAY_TASK_MAX (set {SHARD_COUNT})"
        )
    if count is not None and span is not None and count != span:
        raise ShardError(
            f"--shard-from-env: SLURM_ARRAY_TASK_COUNT={count} disagrees with SLURM_ARRAY_TASK_MIN={low or 0} .. "
            f"SLURM_ARRAY_TASK_MAX={high} ({span} ids): a sparse or stepped array; number it 0-{count - 1} "
            f"or set {SHARD_COUNT}"
        )
    index = task - (low or 0)
    if count is not None:
        count_text = f"SLURM_ARRAY_TASK_COUNT={count}"
    else:
        count_text = f"SLURM_ARRAY_TASK_MAX={high}"
    if low:
        task_text += f" - SLURM_ARRAY_TASK_MIN={low}"
    return _shard(index, count if count is not None else span or 0, task_text, count_text, "slurm")


def _kubernetes(environ: Mapping[str, str]) -> EnvShard | None:
    index = _number(environ, "JOB_COMPLETION_INDEX")
    if index is None:
        return None
    explicit = _explicit_count(environ)
    if explicit is None:
        raise ShardError(
            f"--shard-from-env: JOB_COMPLETION_INDEX={index} is set but not the job's completions: "
            f"pass them to the pod as {SHARD_COUNT} (casekit plan --emit k8s does)"
        )
    return _shard(index, explicit[0], f"JOB_COMPLETION_INDEX={index}", explicit[1], "kubernetes indexed job")


def _casekit(environ: Mapping[str, str]) -> EnvShard | None:
    index = _number(environ, SHARD_INDEX)
    if index is None:
        return None
    explicit = _explicit_count(environ)
    if explicit is None:
        raise ShardError(f"--shard-from-env: {SHARD_INDEX}={index} is set but not {SHARD_COUNT}")
    scheduler = "github actions matrix" if environ.get("GITHUB_ACTIONS") == "true" else "casekit variables"
    return _shard(index, explicit[0], f"{SHARD_INDEX}={index}", explicit[1], scheduler)


def _paired(
    index_name: str, count_name: str, scheduler: str, base: int
) -> Callable[[Mapping[str, str]], EnvShard | None]:
    """A scheduler that names an index (counted from `base`) and a count in its own two variables."""

    def read(environ: Mapping[str, str]) -> EnvShard | None:
        index = _number(environ, index_name)
        if index is None:
            return None
        count = _number(environ, count_name)
        if count is None:
            raise ShardError(f"--shard-from-env: {index_name}={index} is set but not {count_name}")
        explicit = _explicit_count(environ)
        if explicit is not None and explicit[0] != count:
            raise ShardError(
                f"--shard-from-env: {count_name}={count} and {explicit[1]} disagree on the number of shards"
            )
        return _shard(index - base, count, f"{index_name}={index}", f"{count_name}={count}", scheduler)

    return read


READERS: tuple[Callable[[Mapping[str, str]], EnvShard | None], ...] = (
    _slurm,
    _kubernetes,
    _casekit,
    _paired("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", "buildkite", 0),
    _paired("CI_NODE_INDEX", "CI_NODE_TOTAL", "gitlab ci", 1),
)


def shard_from_env(environ: Mapping[str, str]) -> EnvShard:
    """The shard the scheduler's variables in `environ` name; ShardError (one line) when none do, when
    they are out of range or incomplete, or when two schedulers' variables name different shards."""
    found = [shard for shard in (read(environ) for read in READERS) if shard is not None]
    if not found:
        raise ShardError(
            "--shard-from-env: no scheduler's shard variables are set (looked for "
            + ", ".join(LOOKED_FOR)
            + "); run it as an array task, or give --shard K/N"
        )
    first = found[0]
    for other in found[1:]:
        if (other.k, other.n) != (first.k, first.n):
            raise ShardError(
                f"--shard-from-env: the schedulers' variables disagree: {first.source} is shard {first.text}, "
                f"{other.source} is shard {other.text}; unset the ones that do not belong to this job"
            )
    if len(found) > 1:
        agreeing = "; ".join(other.source for other in found[1:])
        return EnvShard(first.k, first.n, f"{first.source} (agrees with {agreeing})")
    return first
