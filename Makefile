# The targets a newcomer types. `make run` and `make test` do all set-up themselves, into a
# project venv (.venv): never the system Python, which PEP 668 systems (Debian, Ubuntu) refuse.
# The venv sees the system's site-packages, so a torch 2.13.0 already installed there is reused.
#   make run ARGS="--allow sandbox=none"      options for the replay (or CASEKIT_ALLOW=sandbox=none)
#   make run ARGS="--torch 2.5.1"             any replay option
BOOTSTRAP_PYTHON ?= python3
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
STAMP := $(VENV)/.casekit-setup.stamp
OUT ?= out
ARGS ?=

.PHONY: run test test-fast setup bench lint format starter report clean distclean identity

# The main job: replay the starter archive on the locally installed torch,
# write the JSON and the HTML report to out/ (replay records history only with
# --record / --commit, so the archive and the git tree stay unchanged). ARGS go to the
# replay. Exit 1 (a result reached --fail-on) still writes the report; exit 2 (nothing
# could run, e.g. no sandbox here) leaves no out/replay.json and says what to pass.
run: $(STAMP)
	@rm -f $(OUT)/replay.json
	@code=0; $(PYTHON) -m casekit replay --archive cases --json $(OUT)/replay.json $(ARGS) || code=$$?; \
	if [ "$$code" -ge 2 ] && $(PYTHON) -c "$$NOTHING_RAN" $(OUT)/replay.json; then \
	    rm -f $(OUT)/replay.json; \
	    echo "make run: nothing could run (replay exit $$code), so $(OUT)/replay.json is removed: do what the" \
	         "error line says, or pass replay options with make run ARGS='...' (a host that cannot sandbox:" \
	         "make run ARGS='--allow sandbox=none', or CASEKIT_ALLOW=sandbox=none make run)" >&2; \
	    exit "$$code"; \
	fi; \
	$(PYTHON) -m casekit report --archive cases --results $(OUT)/replay.json --format html --format md --out $(OUT)/report \
	    && echo "report: $(OUT)/report/index.html" && exit "$$code"

# A replay document in which no target ran (each one's environment failed), or none at all.
export NOTHING_RAN := import json, sys; from pathlib import Path; p = Path(sys.argv[1]); \
    d = json.loads(p.read_text()) if p.is_file() else {}; \
    sys.exit(0 if all(t.get("error") for t in d.get("targets", [])) else 1)

# Every test: real torch, real subprocesses, real git, real Docker (when an engine runs). Three at a time
# (pytest-xdist, a file's tests on one worker), then those whose verdict rests on timings or on wall-clock
# bounds (marker `serial`) alone, on a machine nothing else of ours loads. Three on a 2-core host: the cores
# are busy with two already (3 % idle with three), but the long files that end the pass end closer together:
# 43 min here with three against 48-51 with two (CI, and a run here with other work beside: not side by
# side). TEST_WORKERS=1: one at a time. Exit 5 (no test) only when neither pass collected one.
TEST_WORKERS ?= 3
test: $(STAMP)
	@$(PYTHON) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile --durations 15 -m "not serial" $(PYTEST_ARGS); \
	side=$$?; echo "make test: the tests marked serial (timings, wall-clock bounds), alone"; \
	$(PYTHON) -m pytest -q -ra -p no:xdist -m serial $(PYTEST_ARGS); alone=$$?; \
	if [ $$side -eq 5 ] && [ $$alone -eq 5 ]; then exit 5; fi; \
	for code in $$side $$alone; do [ $$code -eq 0 ] || [ $$code -eq 5 ] || exit $$code; done

# The fast tier: no process, no git, no torch (a spawn outside it fails the test; see tests/conftest.py).
test-fast: $(STAMP)
	$(PYTHON) -m pytest -q -m "not process" $(PYTEST_ARGS)

setup: $(STAMP)

# The project venv, then host tool + test tools + torch 2.13.0 (a local CPU wheel on these
# machines) into it; pip shows what it does, with its bars on a terminal (the first time takes minutes).
$(VENV)/bin/python:
	@echo "setup: creating the project venv $(VENV) (from $(BOOTSTRAP_PYTHON))"
	@$(BOOTSTRAP_PYTHON) -m venv --system-site-packages $(VENV) \
	    || { command -v uv >/dev/null && uv venv --seed --system-site-packages --python $(BOOTSTRAP_PYTHON) $(VENV); } \
	    || { echo "setup: cannot create $(VENV): install your system's venv module (Debian/Ubuntu: python3-venv)" \
	              "or uv (https://docs.astral.sh/uv/), then run make again" >&2; rm -rf $(VENV); exit 2; }

$(STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "setup: installing casekit (editable), the dev tools, uv, torch 2.13.0 and transformers into $(VENV) ..."
	@start=$$(date +%s); \
	$(PYTHON) -m pip install -e '.[dev]' 'torch==2.13.0' 'transformers==5.24.0' uv || exit 1; \
	echo "setup: done in $$(( $$(date +%s) - start )) s"
	@touch $@

# Side by side in one run: casekit replay vs the naive way (one fresh python per script);
# list/validate/report/shard planning on 1,000 and 10,000 synthetic bundles (naive, cold, warm);
# torch's import in a managed venv vs one built without bytecode and one compiled after (bytecode_bench);
# a broken fix's rollback verified in the replay's warm probe vs a second probe (rollback_bench);
# replay --perf: how often its verdicts are wrong, A/A and with a known 10 % change (perf_bench);
# casekit reduce on seven large repros (lines before -> after, candidates/s, naive cost per candidate beside it;
# BENCH_REDUCE_ARGS="--second-python PATH" also checks the pairing on a second release);
# with BENCH_BISECT=1 also k cases x n releases bisected one by one vs shared (builds envs: minutes).
BENCH_SIZES ?= 1000,10000
BENCH_BISECT_ARGS ?= --k 2 --versions 2.5.1,2.8.0,2.13.0
BENCH_REDUCE_ARGS ?= --jobs 2
# replay --perf's false alarms (100 A/A comparisons) and its power (a 10 % heavier side, 10 times): ~1.5-2 h here
BENCH_PERF_ARGS ?= --aa 100 --injected 10
bench: $(STAMP)
	$(PYTHON) bench/replay_bench.py
	$(PYTHON) bench/scale_bench.py --sizes $(BENCH_SIZES)
	$(PYTHON) bench/bytecode_bench.py
	$(PYTHON) bench/rollback_bench.py
	$(PYTHON) bench/perf_bench.py $(BENCH_PERF_ARGS)
	$(PYTHON) bench/reduce_bench.py $(BENCH_REDUCE_ARGS)
ifeq ($(BENCH_BISECT),1)
	$(PYTHON) bench/bisect_shared_bench.py $(BENCH_BISECT_ARGS)
else
	@echo "bisect bench skipped (it builds environments): make bench BENCH_BISECT=1"
endif

# ruff (the probe parsed as Python 3.9), mypy on the core, mypy on the probe for the
# oldest Python mypy targets (3.10; the probe itself must also run on 3.9), the
# import-linter layer contracts of pyproject.toml, and shellcheck on the CI's shell
# scripts when it is installed (tests/test_ci_scripts.py checks the same).
lint: $(STAMP)
	$(PYTHON) -m ruff check casekit tests bench
	$(PYTHON) -m ruff format --check casekit tests bench
	$(PYTHON) -m mypy
	$(PYTHON) -m mypy --python-version 3.10 casekit/probe.py
	PYTHONPATH=$(CURDIR) $(PYTHON) -c 'from importlinter.cli import lint_imports_command; lint_imports_command()'
	@if command -v shellcheck >/dev/null; then shellcheck .ci/run .ci/*.sh containers/*.sh; \
	else echo "shellcheck not installed: shell scripts not linted (apt-get install -y shellcheck)"; fi

format: $(STAMP)
	$(PYTHON) -m ruff format casekit tests bench
	$(PYTHON) -m ruff check --fix casekit tests bench

# Re-capture the starter archive from examples/starter on the local torch.
starter: $(STAMP)
	$(PYTHON) examples/capture_starter.py --archive cases

# Break identity across releases: classify the corpus (tests/corpus) both ways, write docs/identity.md.
identity: $(STAMP)
	$(PYTHON) tests/corpus/confusion.py --out docs/identity.md

# The report of the last `make run` (its JSON), over the history the bundles hold.
report: $(STAMP)
	@test -f $(OUT)/replay.json || { echo "no $(OUT)/replay.json yet: run \`make run\` first"; exit 2; }
	$(PYTHON) -m casekit report --archive cases --results $(OUT)/replay.json --format html --out $(OUT)/report

clean:
	rm -rf $(OUT) .casekit-cache .pytest_cache .mypy_cache .ruff_cache

# clean, and the project venv too (the next make builds it again)
distclean: clean
	rm -rf $(VENV)
