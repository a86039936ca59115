"""The docker runner: replay images (`images`) and the sandboxed container that runs the probe (`runner`)."""
