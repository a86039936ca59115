"""Run one corpus script as its author would, and print Dynamo's own counts: graphs compiled and recompiles.

    python -I tests/corpus/bare.py repro.py   -> {"graphs": 3, "recompiles": 0}

No casekit here: torch.compile is the real one, asked for by name (`inductor`, the default, becomes the
`eager` backend by name, as casekit's probe runs it, so no C++ compiler is needed); the graph count is
Dynamo's `unique_graphs` counter, the recompiles are the "Recompiling function" records of its own
`recompiles` log artifact (its guard_failures table keeps one entry per failed cache entry, not per
recompilation). What the
probe reports for the same script must equal these (tests/test_corpus.py): observing must not change
Dynamo's caching.
"""

from __future__ import annotations

import json
import logging
import runpy
import sys


def main(script: str) -> dict[str, int]:
    import torch
    import torch._dynamo.utils as dynamo_utils

    real_compile = torch.compile

    def compile(model=None, **kwargs):  # noqa: A001 - it stands for torch.compile
        if kwargs.get("backend", "inductor") == "inductor":
            kwargs["backend"] = "eager"
        return real_compile(model, **kwargs) if model is not None else real_compile(**kwargs)

    torch.compile = compile
    recompiles: list[str] = []

    class Recompiles(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            recompiles.append(record.getMessage())

    torch._logging.set_logs(recompiles=True)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.endswith(".__recompiles"):
            logger.addHandler(Recompiles(level=logging.DEBUG))
    sys.argv = [script]
    try:
        runpy.run_path(script, run_name="__main__")
    except BaseException:  # noqa: BLE001 - a script that fails still compiled what it compiled
        pass
    return {
        "graphs": int(dynamo_utils.counters["stats"]["unique_graphs"]),
        "recompiles": sum("Recompiling function" in message for message in recompiles),
    }


if __name__ == "__main__":
    counts = main(sys.argv[1])
    sys.stdout.flush()
    sys.stdout.write("\nCOUNTS " + json.dumps(counts) + "\n")
