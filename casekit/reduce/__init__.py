"""casekit reduce: from the model where a break was found to the minimal repro that keeps the break's identity.

The data's path: the original run (`run.py`) -> the break to keep (`choice.py`) -> one candidate
without the code the original never ran (`coverage.py`) -> candidates made by pysource-minimize in
speculating explorer processes (`explorer.py`, `speculate.py`) and by shrinking inputs
(`inputs.py`) -> each run in the warm probe (`candidates.py`) and judged by casekit's identity
(`oracle.py`), in the original's lines (`lines.py`).
"""
