# The targets a newcomer types. `make run` and `make test` do all set-up themselves.
PYTHON ?= python3
STAMP := .casekit-cache/setup.stamp
OUT ?= out

.PHONY: run test setup bench lint format starter report clean identity

# The main job: replay the starter archive on the locally installed torch,
# write the JSON and the HTML report to out/ (replay records history only with
# --record / --commit, so the archive and the git tree stay unchanged).
run: $(STAMP)
	$(PYTHON) -m casekit replay --archive cases --json $(OUT)/replay.json
	$(PYTHON) -m casekit report --archive cases --results $(OUT)/replay.json --format html --format md --out $(OUT)/report
	@echo "report: $(OUT)/report/index.html"

# Every test: real torch, real subprocesses, real git, real Docker (when an engine runs).
test: $(STAMP)
	$(PYTHON) -m pytest -q -ra $(PYTEST_ARGS)

setup: $(STAMP)

# Host tool + test tools + torch 2.13.0 (a local CPU wheel on these machines).
$(STAMP): pyproject.toml
	$(PYTHON) -m pip install -q -e '.[dev]' 'torch==2.13.0' 'transformers==5.24.0' uv
	@mkdir -p $(dir $@) && touch $@

# Side by side in one run: casekit replay vs the naive way (one fresh python per script);
# list/validate/report/shard planning on 1,000 and 10,000 synthetic bundles (naive, cold, warm);
# casekit reduce on five large repros (lines before -> after, candidates/s, naive cost per candidate beside it;
# BENCH_REDUCE_ARGS="--second-python PATH" also checks the pairing on a second release);
# with BENCH_BISECT=1 also k cases x n releases bisected one by one vs shared (builds envs: minutes).
BENCH_SIZES ?= 1000,10000
BENCH_BISECT_ARGS ?= --k 2 --versions 2.5.1,2.8.0,2.13.0
BENCH_REDUCE_ARGS ?= --jobs 2
bench: $(STAMP)
	$(PYTHON) bench/replay_bench.py
	$(PYTHON) bench/scale_bench.py --sizes $(BENCH_SIZES)
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
