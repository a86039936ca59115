"""A tiny speech-recognition style model split across modules (casekit's multi-file reduction benchmark)."""
