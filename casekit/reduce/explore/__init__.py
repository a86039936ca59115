"""The search: the explorer process that runs the pipeline, its question, and the speculation that forks it."""
