"""`replay --shard-from-env`: the shard a scheduler's task is, from its variables (casekit.replay.shard_env)."""

from __future__ import annotations

import pytest

from casekit.errors import CasekitError
from casekit.replay.plan import ReplayRequest
from casekit.replay.shard import ShardError
from casekit.replay.shard_env import shard_from_env


@pytest.mark.parametrize(
    "environ, shard, words",
    [
        # Slurm: the task id and the array's count, or its min/max (the index is the id minus MIN)
        ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "6"}, "1/6", "slurm: SLURM_ARRAY_TASK_ID=0"),
        ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "5"}, "6/6", "MAX=5"),
        (
            {
                "SLURM_ARRAY_TASK_ID": "3",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_MAX": "6",
                "SLURM_ARRAY_TASK_COUNT": "6",
            },
            "3/6",
            "SLURM_ARRAY_TASK_MIN=1",
        ),
        # casekit's own scripts name the count: a resubmitted task runs in an array of one
        (
            {
                "SLURM_ARRAY_TASK_ID": "4",
                "SLURM_ARRAY_TASK_COUNT": "1",
                "SLURM_ARRAY_TASK_MIN": "4",
                "SLURM_ARRAY_TASK_MAX": "4",
                "CASEKIT_SHARD_COUNT": "6",
            },
            "5/6",
            "CASEKIT_SHARD_COUNT=6",
        ),
        ({"JOB_COMPLETION_INDEX": "2", "CASEKIT_SHARD_COUNT": "3"}, "3/3", "kubernetes indexed job"),
        (
            {"CASEKIT_SHARD_INDEX": "1", "CASEKIT_SHARD_COUNT": "4", "GITHUB_ACTIONS": "true"},
            "2/4",
            "github actions matrix",
        ),
        ({"CASEKIT_SHARD_INDEX": "0", "CASEKIT_SHARD_COUNT": "1"}, "1/1", "casekit variables"),
        ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "2"}, "1/2", "buildkite"),
        ({"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "2"}, "2/2", "gitlab ci: CI_NODE_INDEX=2"),  # GitLab counts from 1
        # two schedulers that agree: the first is used, and the line says both
        (
            {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3", "CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "3"},
            "2/3",
            "agrees with gitlab ci",
        ),
    ],
)
def test_each_scheduler_names_its_shard_and_says_which_it_used(environ: dict[str, str], shard: str, words: str) -> None:
    found = shard_from_env(environ)
    assert found.text == shard
    assert words in found.source


@pytest.mark.parametrize(
    "environ, line",
    [
        (
            {"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "6"},
            "--shard-from-env: SLURM_ARRAY_TASK_ID=6 is out of range for 6 shards (SLURM_ARRAY_TASK_COUNT=6): "
            "the index runs from 0 to 5",
        ),
        (
            {"JOB_COMPLETION_INDEX": "3", "CASEKIT_SHARD_COUNT": "3"},
            "--shard-from-env: JOB_COMPLETION_INDEX=3 is out of range for 3 shards (CASEKIT_SHARD_COUNT=3): "
            "the index runs from 0 to 2",
        ),
        (
            {"CI_NODE_INDEX": "0", "CI_NODE_TOTAL": "2"},
            "--shard-from-env: CI_NODE_INDEX=0 is out of range for 2 shards (CI_NODE_TOTAL=2): "
            "the index runs from 0 to 1",
        ),
        (
            {"JOB_COMPLETION_INDEX": "1"},
            "--shard-from-env: JOB_COMPLETION_INDEX=1 is set but not the job's completions: "
            "pass them to the pod as CASEKIT_SHARD_COUNT (casekit plan --emit k8s does)",
        ),
        (
            {"SLURM_ARRAY_TASK_ID": "1"},
            "--shard-from-env: SLURM_ARRAY_TASK_ID=1 is set but not the array's size: neither "
            "SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MAX (set CASEKIT_SHARD_COUNT)",
        ),
        (
            {"BUILDKITE_PARALLEL_JOB": "1"},
            "--shard-from-env: BUILDKITE_PARALLEL_JOB=1 is set but not BUILDKITE_PARALLEL_JOB_COUNT",
        ),
        (
            {"CASEKIT_SHARD_INDEX": "1"},
            "--shard-from-env: CASEKIT_SHARD_INDEX=1 is set but not CASEKIT_SHARD_COUNT",
        ),
        (
            {
                "SLURM_ARRAY_TASK_ID": "1",
                "SLURM_ARRAY_TASK_COUNT": "6",
                "JOB_COMPLETION_INDEX": "3",
                "CASEKIT_SHARD_COUNT": "6",
            },
            "--shard-from-env: the schedulers' variables disagree: slurm: SLURM_ARRAY_TASK_ID=1, "
            "CASEKIT_SHARD_COUNT=6 is shard 2/6, kubernetes indexed job: JOB_COMPLETION_INDEX=3, "
            "CASEKIT_SHARD_COUNT=6 is shard 4/6; unset the ones that do not belong to this job",
        ),
        (
            {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2", "CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "3"},
            "--shard-from-env: the schedulers' variables disagree: slurm: SLURM_ARRAY_TASK_ID=0, "
            "SLURM_ARRAY_TASK_COUNT=2 is shard 1/2, gitlab ci: CI_NODE_INDEX=1, CI_NODE_TOTAL=3 is shard 1/3; "
            "unset the ones that do not belong to this job",
        ),
        (
            {
                "SLURM_ARRAY_TASK_ID": "2",
                "SLURM_ARRAY_TASK_COUNT": "3",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "4",
            },
            "--shard-from-env: SLURM_ARRAY_TASK_COUNT=3 disagrees with SLURM_ARRAY_TASK_MIN=0 .. "
            "SLURM_ARRAY_TASK_MAX=4 (5 ids): a sparse or stepped array; number it 0-2 or set CASEKIT_SHARD_COUNT",
        ),
        (
            {"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "2", "CASEKIT_SHARD_COUNT": "3"},
            "--shard-from-env: BUILDKITE_PARALLEL_JOB_COUNT=2 and CASEKIT_SHARD_COUNT=3 disagree on the number of shards",
        ),
        (
            {"SLURM_ARRAY_TASK_ID": "one", "SLURM_ARRAY_TASK_COUNT": "2"},
            "--shard-from-env: SLURM_ARRAY_TASK_ID='one' is not a whole number",
        ),
        (
            {"JOB_COMPLETION_INDEX": "0", "CASEKIT_SHARD_COUNT": "0"},
            "--shard-from-env: CASEKIT_SHARD_COUNT=0 gives 0 shards; it must be at least 1",
        ),
        (
            {"HOME": "/root"},
            "--shard-from-env: no scheduler's shard variables are set (looked for SLURM_ARRAY_TASK_ID, "
            "JOB_COMPLETION_INDEX, CASEKIT_SHARD_INDEX, BUILDKITE_PARALLEL_JOB, CI_NODE_INDEX); run it as an "
            "array task, or give --shard K/N",
        ),
    ],
)
def test_out_of_range_missing_counts_and_disagreements_are_one_clear_line(environ: dict[str, str], line: str) -> None:
    with pytest.raises(ShardError) as raised:
        shard_from_env(environ)
    assert str(raised.value) == line


def test_replay_takes_the_shard_from_the_environment_or_from_the_flag_never_both() -> None:
    request = ReplayRequest(shard_env={"JOB_COMPLETION_INDEX": "0", "CASEKIT_SHARD_COUNT": "2"})
    assert request.shard == "1/2"
    assert request.shard_source == "kubernetes indexed job: JOB_COMPLETION_INDEX=0, CASEKIT_SHARD_COUNT=2"
    assert ReplayRequest(shard="2/2").shard_source == "--shard"
    with pytest.raises(CasekitError, match="give --shard K/N or --shard-from-env, not both"):
        ReplayRequest(shard="1/2", shard_env={"JOB_COMPLETION_INDEX": "0", "CASEKIT_SHARD_COUNT": "2"})
