"""The registry of report formats (the interface: `report.interface`): one line per format.

Each format module is imported only when that format is asked for, so listing the
registry (the `report --help`) costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from casekit.errors import CasekitError

if TYPE_CHECKING:
    from casekit.report.interface import ReportFormat

DEFAULT_FORMAT = "html"
DEFAULT_OUT = Path("casekit-report")


def _html() -> ReportFormat:
    from casekit.report.html_report import HtmlReport

    return HtmlReport()


def _markdown() -> ReportFormat:
    from casekit.report.markdown import MarkdownReport

    return MarkdownReport()


def _junit() -> ReportFormat:
    from casekit.report.junit import JunitReport

    return JunitReport()


def _json() -> ReportFormat:
    from casekit.report.json_report import JsonReport

    return JsonReport()


FORMATS: dict[str, Callable[[], ReportFormat]] = {"html": _html, "md": _markdown, "junit": _junit, "json": _json}


def get_format(name: str) -> ReportFormat:
    factory = FORMATS.get(name)
    if factory is None:
        raise CasekitError(f"unknown report format {name!r} (choose one of: {', '.join(FORMATS)})")
    return factory()


def format_names(names: list[str] | None = None) -> str:
    """'html, md, junit or json': the registry's names (or those given) as a help text lists them."""
    names = list(FORMATS) if names is None else names
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
