"""Replaying an archive: what is asked and how it ends (`plan`), running each target and classifying
what came back (`run`), the replay document (`document`) and sharding and merging it (`shard`)."""
