"""The oracle: candidates run in the warm probe and judged by casekit's identity; which break to keep."""
