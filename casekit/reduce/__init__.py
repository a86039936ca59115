"""casekit reduce: from the model where a break was found to the smallest repro that keeps the break's identity.

The data's path, one folder each:
  run.py           the driver: the request (request.py), the original's run -> facts.py, the pipeline, confirm.py
  judge/           the oracle: candidates run in the warm probe (probe.py), judged by casekit's identity
                   (oracle.py) in the original's lines; which break to keep (choice.py)
  explore/         the search: an explorer process runs the pipeline (explorer.py), asking one question at a
                   time (search.py: static refusals first); speculate.py forks it for --jobs; wire.py
  passes/          the passes, each `run(search)` over trees (base.py: the interface)
  source/          a candidate's files: trees rendered (candidate.py), placed in the original's lines
                   (lines.py); finished with the original's comments (comments.py, finish.py), formatted
  output.py, result.py, summary.py, filing.py, target.py, checklist.py   around the driver

The pipeline (pipeline.py's PIPELINE, the one list; the reducer picks, the explorer runs, in this order):
  coarse    code the original never ran -> what follows the break in each frame of its call path ->
            inputs of the compiled call written as literals -> what each frame of the path recomputes
            before the break -> (unused parameters -> unused results -> what nothing reads) x3 ->
            loops run once -> what nothing reads (names, members) -> config literals -> loop counts ->
            included files
  code      (whole statements, halves first -> what nothing reads -> files) x3 -> single-use
            variables -> (pysource-minimize -> what nothing reads) x2 -> unused parameters ->
            (statements -> unread -> files) x2 -> single-use variables -> shapes, loop counts, sizes
  tidy      unused parameters left -> unused results left -> what nothing reads left (every file) ->
            included files no import names -> stand-in values as their kind -> the compile call as
            written -> docstrings -> comments of the kept lines, formatted (judged even past the deadline)
Every step proposes candidates through one question, judged by the oracle; a kept one is the best so
far (written to --out at once) and the start of everything after it. Near --max-time the reducing
steps are refused unrun and the tidy ones still run.
"""
