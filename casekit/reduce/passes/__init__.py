"""The passes: each one `run(search)` that proposes candidates through one question (base.py)."""
