# The two set-up commands of README.md live here: `make serve` and `make test`.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_PACKAGES := kcat etcd-server etcd-client chromium chromium-driver

.PHONY: serve install deps typecheck test bench

# Start a single-node broker with its data in ./data (embedded metadata store), everything on
# loopback: PLAINTEXT on 127.0.0.1:9092 as before, a SASL listener for tenants on :9093, the HTTP
# admin API on :9644, metrics on :9645 and a generated admin (./data/admin.properties, mode 0600);
# it prints the commands to try tenants (shoal serve --quickstart, shoal/quickstart.py).
serve: install
	@$(PYTHON) -c 'import sys, confluent_kafka; sys.exit(confluent_kafka.version()[1] < 0x2050000)' 2>/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'confluent-kafka>=2.5'  # for the banner's Python example
	$(PYTHON) -m shoal serve --quickstart --log-dirs ./data

# The editable install of this checkout, only when needed: pip (half a minute, most of it building
# the editable wheel; a restart's broker needs under a second) runs when Python's `shoal` is not the
# editable install of this directory (a fresh machine, or another checkout installed since) or when
# what the install builds from (pyproject.toml, setup.py, the C speed-ups, the version in
# shoal/__init__.py, which pyproject.toml reads) changed after the last install from here, which
# $(INSTALL_STAMP) records. `make deps` (so `make test`) always installs.
INSTALL_STAMP := .install.stamp
INSTALL_INPUTS := pyproject.toml setup.py shoal/_native/speedups.c shoal/__init__.py
# (The first `shoal` with a direct_url.json: `python -c` also finds the checkout's own shoal.egg-info.)
INSTALLED_HERE := $(PYTHON) -c 'import json, os, sys, importlib.metadata as m, urllib.parse as u; \
	d = next((json.loads(t) for t in (x.read_text("direct_url.json") for x in m.distributions(name="shoal")) if t), {}); \
	p = u.unquote(u.urlsplit(d.get("url", "")).path); \
	sys.exit(not (d.get("dir_info", {}).get("editable") and os.path.isdir(p) and os.path.samefile(p, ".")))'
install:
	@if [ -z "$$(find $(INSTALL_INPUTS) -newer $(INSTALL_STAMP) 2>&1)" ] && $(INSTALLED_HERE) 2>/dev/null; then \
	  echo "shoal is installed from here, unchanged since (rm $(INSTALL_STAMP) to install again)"; \
	else $(PIP) install -q --disable-pip-version-check -e . && touch $(INSTALL_STAMP); fi

# Everything the tests need: Debian packages (kcat; etcd for the cluster tests, which start a
# three-member etcd on loopback; chromium for the capacity report test and, with chromium-driver,
# the console's browser test (tests/console, Selenium); a Java runtime for Spark
# when there is none) and
# Python packages (the real Kafka clients; PySpark and pyarrow for tests/spark).
deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	if [ -n "$$missing" ]; then $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing; fi
	$(PIP) install -q --disable-pip-version-check -e '.[test,spark]' && touch $(INSTALL_STAMP)

# Install what the tests need, then run the whole suite: most of it on $(TEST_WORKERS) pytest-xdist
# workers (it mostly waits on brokers, etcd and Spark), one group per module (tests/conftest.py);
# then the tests that measure time or throughput (marked `serial`) with nothing beside them.
# Both phases print their slowest tests (setup, call and teardown each), so a run shows where the
# time went (issue 26, part 7: `make test` stays under 15 minutes).
# 4 workers on 2 cores: the parallel phase mostly waits (on brokers, etcd, Spark); measured on a
# fresh clone, 3 workers 646 s, 4 workers 559 s (12 min 48 s for all of make test)
TEST_WORKERS ?= 4
TEST_DURATIONS ?= 25
PYTEST := $(PYTHON) -m pytest -q -p no:cacheprovider --durations=$(TEST_DURATIONS) --durations-min=1.0
# Byte code cached for the run, outside the tree (build/ is ignored), even where the environment sets
# PYTHONDONTWRITEBYTECODE: else every broker process and CLI call a test starts compiles Shoal again,
# and every pytest process rewrites the asserts of every test module (13 s of CPU, 5 s cached), for
# 28% of the CPU time of the CLI tests (measured).
test: export PYTHONDONTWRITEBYTECODE :=
test: export PYTHONPYCACHEPREFIX := $(CURDIR)/build/pycache
test: deps
	$(MAKE) --no-print-directory typecheck
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not serial"; rc=$$?; \
	$(PYTEST) -m serial && exit $$rc

# The type checker over the packages [tool.mypy] in pyproject.toml lists (issue 26, part 6), in
# about five seconds: `make test` runs it first, so a type error fails the suite (and CI).
typecheck:
	$(PYTHON) -m mypy

bench: install
	$(PIP) install -q --disable-pip-version-check -e '.[bench]'
	$(PYTHON) bench/bench_brokers.py
