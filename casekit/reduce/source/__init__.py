"""A candidate's files: trees rendered and placed in the original's lines, finished with its comments."""
