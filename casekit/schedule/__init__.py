"""Replaying an archive on the schedulers teams already run (Slurm, Kubernetes, GitHub Actions).

casekit schedules nothing itself: `plan` cuts the case x target matrix into shards
balanced by the run times the bundles recorded (the same cut `replay --shard` and
`--shard-from-env` make on every machine), and `emit` writes the job files an
engine runs: a Slurm array plus a merge job, Kubernetes Indexed Jobs plus a merge
Job, a GitHub Actions workflow. Every shard writes its own result files
(`replay --results-dir`), and `merge` reads the folder back.
"""
