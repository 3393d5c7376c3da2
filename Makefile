# Two entry points for a fresh Debian 12 machine:
#   make demo   installs everything, then runs the reconciler on the local example
#   make test   installs everything, then runs lint, types, layer contracts and the tests
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# prometheus: promtool and a Prometheus server for tests/deploy and `lab up --metrics` (each
# starts its own on a free loopback port with a config of its own; the package's own service is
# neither needed nor touched). prometheus-libvirt-exporter: one per lab host under --metrics.
# libc6-dev: the static C library the workload guests' /init is compiled against; cpio: the
# tests read the guests' initrd with it. systemd: systemd-analyze for the unit's security score.
# ipmitool: the ipmi power driver runs it; openssl: the power tests' HTTPS BMC certificate.
APT_PACKAGES := python3-venv python3-dev gcc libc6-dev pkg-config libvirt-dev libvirt-clients \
	libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils git etcd-server \
	prometheus prometheus-libvirt-exporter cpio systemd ipmitool openssl

.PHONY: demo test setup system-packages lab-guest lint check clean mutation

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
	fi; \
	if echo $$missing | grep -qw prometheus-libvirt-exporter && [ -d /run/systemd/system ]; then \
	  echo "prometheus-libvirt-exporter is only needed for its binary (the lab starts its own): disabling its service"; \
	  $(SUDO) systemctl disable --now prometheus-libvirt-exporter.service || true; \
	fi

$(VENV)/.installed: pyproject.toml | system-packages
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,libvirt,lab]'
	touch $@

# Setup also makes the workload guests' kernel and initrd (`lab up --workload`) once, into the
# cache ~/.cache/reconciler/lab-guest: Debian's cloud kernel package, fetched with apt-get
# download (from Debian's package lists, which apt-get update fetches), and /init compiled with
# gcc -static. Where that cannot be done, setup says why and goes on; `make lab-guest` fails.
setup: system-packages $(VENV)/.installed
	@$(VENV)/bin/reconciler lab guest || \
	  echo "the lab's workload guests cannot be made here (see above); everything else can"

lab-guest: setup
	$(VENV)/bin/reconciler lab guest

# The lab's VMs are workload guests that keep kvm-01 busy, watched by a Prometheus (`lab status`
# says where); its policy balances on the CPU they use as that Prometheus measures it. It needs
# root and libvirtd: where workload guests cannot start, firmware VMs stand in (balanced on what
# they are given), and where no lab can, libvirt's test driver. `plan` exits 2 when it proposes changes: that
# is the demo's expected outcome.
demo: setup
	$(VENV)/bin/reconciler validate cluster-state/
	$(VENV)/bin/reconciler lab up --recreate --workload --metrics || \
	  $(VENV)/bin/reconciler lab up --recreate || \
	  $(VENV)/bin/reconciler lab up --recreate --driver test
	$(VENV)/bin/reconciler observe
	@# the workload lab balances on what its guests use, as its Prometheus measures it over a
	@# window of a minute: wait for one
	@if $(VENV)/bin/reconciler lab status | grep -q '^Prometheus: '; then \
	  echo "waiting 70s for a minute of load in the lab's Prometheus ..."; sleep 70; \
	fi
	$(VENV)/bin/reconciler plan --state-dir .lab/state; [ $$? -ne 1 ]
	@# live migration needs the real lab; the test driver cannot migrate
	if grep -q '"driver": "qemu"' .lab/lab.json; then \
	  $(VENV)/bin/reconciler apply --yes --state-dir .lab/state && \
	  $(VENV)/bin/reconciler plan --state-dir .lab/state; \
	fi
	@# with the lab's Prometheus: what the example policy, and one with a lower threshold, would
	@# have done with the load the lab's guests made since it started (docs/simulate.md)
	@url=$$($(VENV)/bin/reconciler lab status | sed -n 's/^Prometheus: //p'); \
	if [ -n "$$url" ]; then \
	  sleep 30; \
	  $(VENV)/bin/reconciler observe --format json > .lab/observed.json; \
	  sed 's/^\(  threshold: \)[0-9]*/\15/' .lab/cluster-state/policy.yaml > .lab/threshold-5.yaml; \
	  $(VENV)/bin/reconciler simulate .lab/cluster-state --prometheus "$$url" --since 30m \
	    --snapshot .lab/observed.json --policy .lab/threshold-5.yaml \
	    --chart .lab/simulate-chart.svg && echo "chart: .lab/simulate-chart.svg"; \
	fi
	@echo; echo "The lab keeps running: try '$(VENV)/bin/reconciler lab status'; stop it with '$(VENV)/bin/reconciler lab down'."

lint: setup
	$(VENV)/bin/ruff check reconciler tests benchmarks deploy
	$(VENV)/bin/ruff format --check reconciler tests benchmarks deploy
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The lab proofs marked long (a minute or more each) run in the lab CI job (-m "lab or libvirt").
# The tests that need no lab run on every core (pytest-xdist); the lab's tests after them, one at
# a time, since they time real migrations. Lab proofs marked `long` are the lab CI job's.
test: lint
	$(VENV)/bin/pytest -q --durations=15 -n auto --dist worksteal -m "not lab and not long"
	$(VENV)/bin/pytest -q --durations=15 -m "lab and not long"

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
