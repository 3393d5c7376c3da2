# Two entry points for a fresh Debian 12 machine:
#   make demo   installs everything, then runs the reconciler on the local example
#   make test   installs everything, then runs lint, types, layer contracts and the tests
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# prometheus: promtool and a Prometheus server for tests/deploy (each test starts its own on a
# free loopback port with a temporary config; the package's own service is neither needed nor
# touched). systemd: systemd-analyze for the unit's security score.
APT_PACKAGES := python3-venv python3-dev gcc pkg-config libvirt-dev libvirt-clients \
	libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils git etcd-server \
	prometheus systemd

.PHONY: demo test setup system-packages lint check clean mutation

system-packages:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi; \
	if echo $$missing | grep -qw etcd-server && [ -d /run/systemd/system ]; then \
	  echo "etcd-server is only needed for its binary (tests start their own): disabling the etcd service it started"; \
	  $(SUDO) systemctl disable --now etcd.service || true; \
	fi

$(VENV)/.installed: pyproject.toml | system-packages
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,libvirt]'
	touch $@

setup: system-packages $(VENV)/.installed

# The lab needs root and libvirtd; where it cannot start, libvirt's test driver stands in.
# `plan` exits 2 when it proposes changes: that is the demo's expected outcome.
demo: setup
	$(VENV)/bin/reconciler validate cluster-state/
	$(VENV)/bin/reconciler lab up --recreate || $(VENV)/bin/reconciler lab up --recreate --driver test
	$(VENV)/bin/reconciler observe
	$(VENV)/bin/reconciler plan --state-dir .lab/state; [ $$? -ne 1 ]
	@# live migration needs the real lab; the test driver cannot migrate
	if grep -q '"driver": "qemu"' .lab/lab.json; then \
	  $(VENV)/bin/reconciler apply --yes --state-dir .lab/state && \
	  $(VENV)/bin/reconciler plan --state-dir .lab/state; \
	fi
	@echo; echo "The lab keeps running: try '$(VENV)/bin/reconciler lab status'; stop it with '$(VENV)/bin/reconciler lab down'."

lint: setup
	$(VENV)/bin/ruff check reconciler tests benchmarks deploy
	$(VENV)/bin/ruff format --check reconciler tests benchmarks deploy
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/pytest -q --durations=15

# On demand, not in CI (tens of minutes on two cores): mutates the code that decides and performs
# moves ([tool.mutmut] in pyproject.toml), runs the fast tests that reach each mutant, prints the
# score per module and every mutant no test killed. MUTANTS='reconciler.core.admission*' limits
# it to some; results are kept in mutants/ and only changed functions run again.
MUTANTS ?=
mutation: setup
	nice -n 10 $(VENV)/bin/mutmut run --max-children 2 $(MUTANTS) > mutants.log 2>&1 || { tail -50 mutants.log; exit 1; }
	$(VENV)/bin/python benchmarks/mutation_scores.py

clean:
	rm -rf $(VENV) mutants mutants.log .mypy_cache .ruff_cache .pytest_cache .hypothesis
