# Two commands a user starts with: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COMPILED := spark_apps/source/__pycache__/.compiled
CLASS_ARCHIVE := $(VENV)/share/logbroker/spark-classes.jsa

.PHONY: setup system-deps test demo lint typecheck bench-storage clean

setup: system-deps $(STAMP) $(COMPILED) $(CLASS_ARCHIVE)

system-deps:
	@PYTHON=$(PYTHON) bash scripts/install-system-deps.sh

# Reinstall only when the pinned packages or the project metadata change. uv installs the
# lock (Airflow, Spark and GX: ~200 packages) in a fraction of pip's time; --compile-bytecode
# because this environment sets PYTHONDONTWRITEBYTECODE and imports are slow without .pyc.
UV_VERSION := 0.13.9
# The editable install also compiles the message-set walks (setup.py: _native.pyx and
# _native08.pyx with the system's gcc and zlib); the last line says whether they run compiled
# or in pure Python.
$(STAMP): pyproject.toml requirements.lock setup.py plugins/logbroker/protocol/_native.pyx \
		plugins/logbroker/protocol/_native08.pyx plugins/logbroker/protocol/_crc32.h
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -r requirements.lock
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@$(BIN)/logbroker --version | tail -n 1
	@touch $(STAMP)

# The Spark reader's numba code, compiled into its cache once (not in every Spark worker).
$(COMPILED): $(STAMP) spark_apps/load/event_names.py spark_apps/source/avro_compiled.py
	$(BIN)/python scripts/compile_readers.py
	@touch $@

# Spark's classes parsed once for every later spark-submit (spark_apps/class_archive.py): a
# Spark application's JVM then starts in ~60 % of the time. Made again when Spark is.
$(CLASS_ARCHIVE): $(STAMP) spark_apps/class_archive.py
	$(BIN)/python -m spark_apps.class_archive

# Re-pin requirements.lock from requirements.in (after changing a version there).
.PHONY: lock
lock: setup
	$(BIN)/uv pip compile --quiet --python-version 3.11 requirements.in -o requirements.lock

# Third-party Kafka 0.7 clients (npm) for tests/compat; those tests skip without node/npm.
COMPAT_NODE := tests/compat/node
$(COMPAT_NODE)/node_modules/.package-lock.json: $(COMPAT_NODE)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	    npm ci --prefix $(COMPAT_NODE) --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: tests/compat will skip the Node clients"; fi

test: setup $(COMPAT_NODE)/node_modules/.package-lock.json
	$(BIN)/python -m pytest

# The same suite on the pure-Python message-set walks (the reference and the fallback where
# the extension cannot be built); brokers, clients and Spark's workers inherit the setting.
.PHONY: test-pure
test-pure: setup $(COMPAT_NODE)/node_modules/.package-lock.json
	LOGBROKER_PURE_PYTHON=1 $(BIN)/python -m pytest

# mypy --strict (pyproject.toml's [tool.mypy]) over the library and the pipeline:
# plugins/logbroker, spark_apps (the audit included), plugins/hooks, plugins/pipeline_ui
# and dags; MYPYPATH checks the checked-out plugins/, wherever the editable install points.
# tests/test_typecheck.py runs the same.
typecheck: setup
	MYPYPATH=plugins $(BIN)/mypy

# The README's screenshots of the Airflow UI, taken by the UI journeys (headless Chromium
# through the login form on a stack shaped like `make up`) and by the audit report's test.
.PHONY: screenshots
screenshots: setup
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/deploy/test_ui_journeys.py -q
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/audit_app/test_audit.py -q -k renders

# The three UI journeys alone (schedule, backfill, review) in headless Chromium, on a stack
# shaped like `make up` (~5 min; `make test` runs them too).
.PHONY: test-ui
test-ui: setup
	$(BIN)/python -m pytest tests/deploy/test_ui_journeys.py -q

# `make up`'s test with its loads: a down while an hour loads, the scheduler's catch-up after
# the next up, every topic-hour published once (8-10 min; `make test` runs the ups and downs).
.PHONY: test-up
test-up: setup
	LOGBROKER_UP_LOADS=1 $(BIN)/python -m pytest tests/deploy/test_up.py -q -k resumes

# ruff's lint and format check, and typecheck
lint: setup typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The whole pipeline once through Airflow's scheduler (scripts/demo.py), then everything stops.
demo: setup
	$(BIN)/python scripts/demo.py

# The log broker alone: a cluster, 300,000 events through a consumer group.
.PHONY: demo-broker up down
demo-broker: setup
	$(BIN)/python scripts/broker_demo.py

# The stack left running with live traffic, shaped like a one-machine deployment: Airflow on
# PostgreSQL, a Spark standalone master and two workers (scripts/up.py). The Airflow UI's port
# is UI_PORT (make up UI_PORT=8090), 8080 by default; UP_ARGS passes scripts/up.py's options
# (--spark-port, --spark-ui-port, --rate, --fresh). `make down` stops it all by PID and keeps
# the data in var/up/: `make up` again resumes on it.
UI_PORT ?= 8080
up: setup
	UI_PORT=$(UI_PORT) $(BIN)/python scripts/up.py up $(UP_ARGS)

# The pipeline while its parts die (scripts/chaos.py): CHAOS_ARGS="--seed 2 --hours 6", etc.
.PHONY: chaos
chaos: setup
	$(BIN)/python -m scripts.chaos $(CHAOS_ARGS)  # as a module: it imports scripts.demo

# Replicated topics under kills, pauses and network cuts, each broker on a host of its own
# (network namespaces: needs root), checked Jepsen-style (docs/chaos.md): DURATION seconds of
# faults at each of SEEDS; the verdict per seed, results in var/chaos-replication/seed-N/.
SEEDS ?= 1 2 3
DURATION ?= 120
.PHONY: chaos-replication
chaos-replication: setup
	$(BIN)/python -m harness.jepsen.run --seeds "$(SEEDS)" --duration $(DURATION) \
		--results var/chaos-replication

down:
	@test -x $(BIN)/python && $(BIN)/python scripts/up.py down || echo "nothing to stop (no .venv)"

bench-storage: setup
	$(BIN)/python bench/bench_storage.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The broker benchmark against RabbitMQ, ActiveMQ and Redis (docs/performance.md): installs
# the peers from Debian and their pinned Python clients, then runs every system, ~30 min.
# BENCH_ARGS passes options to bench/run.py, e.g. make bench BENCH_ARGS="--growth-gb 1".
.PHONY: bench
bench: setup
	@bash bench/install-peers.sh $(VENV)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# The 2014 post's replication table (docs/performance.md, "Replication"): three brokers on this
# machine, rf 1 against rf 3 with acks 1 and -1, ~5 min; only bench/requirements.txt (the plots)
# is installed. BENCH_ARGS as above, e.g. BENCH_ARGS="--reps 5 --baseline replication".
.PHONY: bench-replication
bench-replication: setup
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r bench/requirements.txt
	$(BIN)/python bench/replication.py $(BENCH_ARGS)
