"""Re-capture the starter archive: every examples/starter/<id>/ (repro.py, fixed.py, meta.toml).

Run with `make starter`. Each case is observed for real with the probe on the
interpreter running this script; the bundles land in --archive (default cases/).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from casekit.archive.store import Archive
from casekit.capture import CaptureRefused, CaptureRequest, capture
from casekit.runners.interface import TargetSpec
from casekit.runners.registry import make_runner

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--archive", default="cases")
    parser.add_argument("--source", default=str(HERE / "starter"), help="folder of case folders")
    parser.add_argument("--python", default=None, help="interpreter to capture with [default: this one]")
    parser.add_argument("--waive", action="append", default=[], help="keep cases failing this gate (repeatable)")
    parser.add_argument("only", nargs="*", help="case ids to capture [default: all]")
    args = parser.parse_args()
    archive = Archive(Path(args.archive))
    runner = make_runner(TargetSpec(runner="python", python=args.python))
    refusals = 0
    folders = sorted(p for p in Path(args.source).iterdir() if (p / "meta.toml").exists())
    for folder in folders:
        if args.only and folder.name not in args.only:
            continue
        meta = tomllib.loads((folder / "meta.toml").read_text())
        fixed = folder / "fixed.py"
        request = CaptureRequest(
            script=folder / "repro.py",
            fixed=fixed if fixed.exists() else None,
            case_id=folder.name,
            title=meta["title"],
            tags=list(meta.get("tags", [])),
            notes=meta.get("notes", ""),
            fix_summary=meta.get("fix_summary", ""),
            rollback_notes=meta.get("rollback_notes", ""),
            force=True,
            waive=list(args.waive),
        )
        try:
            case = capture(request, runner, archive, lambda message: print(f"  ... {message}", file=sys.stderr))
        except CaptureRefused as refused:  # the gates: this case would not reproduce here; nothing written
            refusals += 1
            print(f"{folder.name}: refused\n  " + str(refused).replace("\n", "\n  "))
            continue
        pre, post = case.observations["pre"], case.observations.get("post")
        mark = " (sentinel)" if case.capture and case.capture.sentinel else ""
        print(
            f"{case.id}{mark}: pre {pre.status.value} {len(pre.sites)} break(s) {len(pre.recompiles)} recompile(s); "
            + (
                f"post {post.status.value} {len(post.sites)} break(s) {len(post.recompiles)} recompile(s)"
                if post
                else "no post"
            )
        )
    return 1 if refusals else 0


if __name__ == "__main__":
    sys.exit(main())
