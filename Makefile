# The targets a newcomer types. `make run` and `make test` do all set-up themselves.
PYTHON ?= python3
STAMP := .casekit-cache/setup.stamp
OUT ?= out

.PHONY: run test setup bench lint format starter report clean

# The main job: replay the starter archive on the locally installed torch,
# write the JSON and the HTML report to out/ (the archive itself is not changed).
run: $(STAMP)
	$(PYTHON) -m casekit replay --archive cases --no-record --json $(OUT)/replay.json
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
# with BENCH_BISECT=1 also k cases x n releases bisected one by one vs shared (builds envs: minutes).
BENCH_SIZES ?= 1000,10000
BENCH_BISECT_ARGS ?= --k 2 --versions 2.5.1,2.8.0,2.13.0
bench: $(STAMP)
	$(PYTHON) bench/replay_bench.py
	$(PYTHON) bench/scale_bench.py --sizes $(BENCH_SIZES)
ifeq ($(BENCH_BISECT),1)
	$(PYTHON) bench/bisect_bench.py $(BENCH_BISECT_ARGS)
else
	@echo "bisect bench skipped (it builds environments): make bench BENCH_BISECT=1"
endif

lint: $(STAMP)
	$(PYTHON) -m ruff check casekit tests bench
	$(PYTHON) -m ruff format --check casekit tests bench
	$(PYTHON) -m mypy

format: $(STAMP)
	$(PYTHON) -m ruff format casekit tests bench
	$(PYTHON) -m ruff check --fix casekit tests bench

# Re-capture the starter archive from examples/starter on the local torch.
starter: $(STAMP)
	$(PYTHON) examples/capture_starter.py --archive cases

report: $(STAMP)
	$(PYTHON) -m casekit report --archive cases --format html --out $(OUT)/report

clean:
	rm -rf $(OUT) .casekit-cache .pytest_cache .mypy_cache .ruff_cache
