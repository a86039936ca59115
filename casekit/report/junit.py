"""The JUnit XML report: one testcase per case x target, for CI dashboards.

A result at the report's `--fail-on` level or above (error by default; `--fail-on
warn` makes "now falls back to eager" and a slower timing red too) is a failure, with what went wrong
(a slower axis named in its message, its p-value, threshold and noise floor in its body);
below it the test passes and carries its details in system-out; a case never
replayed on a target is skipped. One testsuite per target.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from casekit.outcome import FailOn
from casekit.report.interface import ReportFormat
from casekit.report.summary import ArchiveSummary, Cell, axis_verdict, axis_words
from casekit.report.text import perf_text

# XML 1.0 cannot carry most control characters, even escaped; bundles may hold any text.
XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def clean(text: object) -> str:
    return XML_INVALID.sub("?", str(text))


def testcase(suite: ET.Element, case_id: str, target: str, cell: Cell | None, fail_on: FailOn = FailOn.ERROR) -> str:
    """Add one testcase; returns 'failure', 'skipped' or 'passed'."""
    element = ET.SubElement(suite, "testcase", classname=clean(f"casekit.{target}"), name=clean(case_id), time="0")
    if cell is None:
        ET.SubElement(element, "skipped", message="not replayed on this target")
        return "skipped"
    timed = [perf_text(case_id, entry) for entry in cell.perf]
    body = "\n".join(clean(d) for d in [*cell.details, *timed]) or cell.class_summary()
    summary = f"{cell.verdict} ({cell.severity.value}) on torch {cell.torch}: {cell.class_summary()}"
    slower = [
        f"{entry.script.value}-fix {axis_words(axis.axis)} {axis_verdict(axis)} against {entry.comparison.baseline}"
        for entry, axis in cell.slower()
        if entry.comparison is not None
    ]
    if slower:  # a slower axis is a warning: the failure says which, the body why (p, threshold, noise floor)
        summary += "; perf: " + ", ".join(slower)
    if fail_on.reached_by(cell.severity):
        failure = ET.SubElement(element, "failure", message=clean(summary), type=clean(cell.verdict))
        failure.text = body
        return "failure"
    out = ET.SubElement(element, "system-out")
    out.text = clean(summary) + ("\n" + body if cell.details or timed else "")
    return "passed"


def render_junit(summary: ArchiveSummary) -> str:
    root = ET.Element("testsuites", name="casekit")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for target in summary.targets:
        suite = ET.SubElement(root, "testsuite", name=clean(target.label), timestamp=summary.generated)
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="torch", value=clean(target.torch))
        ET.SubElement(properties, "property", name="fail-on", value=summary.fail_on.value)
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for case in summary.cases:
            outcome = testcase(suite, case.case.id, target.label, case.cells.get(target.label), summary.fail_on)
            counts["tests"] += 1
            if outcome in ("failure", "skipped"):
                counts[outcome if outcome == "skipped" else "failures"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("errors", "0")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


class JunitReport(ReportFormat):
    name = "junit"
    main_file = "junit.xml"

    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        return {self.main_file: render_junit(summary)}
