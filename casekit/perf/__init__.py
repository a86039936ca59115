"""Performance verdicts: what each script costs on each target, measured side by side in one run.

settings   what --perf measures and the thresholds it judges with (PerfSettings)
measure    the protocol: fresh processes of one script on every target, interleaved, one at a time
samples    one process's run read back: compile time, phases, caches, timed blocks, structure
compare    figures per target, and each target against the baseline, axis by axis
judge      the three-state rule (slower / same / faster / inconclusive), scipy's tests, the noise floor
phase      replay's perf phase: sessions, subjects, results, the lines that raise a verdict
"""
