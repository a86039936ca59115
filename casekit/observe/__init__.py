"""From raw probe output to observations: log parsing and reason normalization."""

from casekit.observe.interpret import failed_observation, interpret

__all__ = ["failed_observation", "interpret"]
