# The kit's entry points. `make help` lists them.
SHELL := /bin/bash
PY := .venv/bin/python
ARCH ?=
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help bootstrap artifacts lab lab-down lab-status demo test test-ops lint unit integration molecule e2e bench bench-txclients bench-mirror bench-pipeline bench-catchup bench-emulated

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

bootstrap: ## install Debian packages, podman settings and the Python venv (idempotent)
	@echo "==> bootstrap"; bash scripts/bootstrap.sh

artifacts: bootstrap ## fill the controller's artifact cache (artifacts/)
	@$(PY) -m pikit.artifacts

lab: bootstrap ## build the Pi image if needed and start the lab from inventory/lab (ARCH=arm64 to emulate)
	@$(PY) -m pikit_dev.lab up $(if $(ARCH),--arch $(ARCH))

lab-down: ## remove the lab's containers and network
	@$(PY) -m pikit_dev.lab down

lab-status: ## list the lab containers on this machine
	@$(PY) -m pikit_dev.lab status

demo: bootstrap ## the main job on the local lab: cluster up, provisioned by playbooks/site.yml
	@$(PY) -m pikit_dev.targets demo

test: bootstrap ## everything CI runs: lint, unit, integration, molecule, the end-to-end fault suite
	@$(PY) -m pikit_dev.targets test

test-ops: bootstrap artifacts ## what make test leaves out, in two lanes (README: What make test-ops adds): the end-to-end suite's Pis lost for good, long nemesis, certificate renewal, CA rotation, contract roll-out and a Bookworm lab re-flashed with Trixie; beside it, idle, the day-2 unit tests and the heavier molecule scenarios (a site mirrored to a core, Kafka's upgrade and scale-out/in, dedicated controllers and broker faults, 3 to 5 to 3 voters, Spark's tarball, the agent on emulated arm64 and armhf)
	@$(PY) -m pikit_dev.targets test-ops

lint: bootstrap ## yamllint, ansible-lint (production), ruff, mypy
	@$(PY) -m pikit_dev.targets lint

unit: bootstrap ## unit tests only
	@$(PY) -m pytest -q -n 2 tests/unit edge_agent/edge_agent/sensors

integration: bootstrap artifacts ## integration tests only (real Kafka from the cache)
	@$(PY) -m pytest -q tests/integration

molecule: bootstrap ## every molecule scenario
	@for s in roles/*/molecule/*/molecule.yml; do r=$${s#roles/}; r=$${r%%/*}; n=$$(basename $$(dirname $$s)); \
	  (cd roles/$$r && molecule test -s $$n) || exit 1; done

e2e: bootstrap artifacts ## the end-to-end fault suite on its own lab, ops scenarios included (about 45 minutes)
	@$(PY) -m pytest -q -s tests/e2e

bench: bootstrap artifacts ## benchmarks (never part of make test); results go in bench/README.md
	@$(PY) -m bench.agent_drain --readings 2000000 --rounds 3
	@$(PY) -m bench.agent_footprint --backlog 400000 --seconds 60
	@taskset -c 0 $(PY) -m bench.spool_write --readings 400000 --rounds 5
	@taskset -c 0,1 $(PY) -m bench.parse --records 20000 --rounds 3
	@taskset -c 0,1 $(PY) -m bench.batch --records 10000 --rounds 3

bench-txclients: bootstrap artifacts ## the driver's transactional client, kafka-python (bounded) beside confluent-kafka, against a broker frozen or killed at a commit
	@$(PY) -m bench.txclient_trial --rounds 3

bench-mirror: bootstrap artifacts ## a site's mirror to a core: the Connect worker's footprint on its 256 MB heap, its copy rate beside what the site accepts
	@$(PY) -m bench.mirror --rounds 3

bench-pipeline: bootstrap ## the pipeline on the demo's lab (run make demo first): sustained rate, latency
	@$(PY) -m bench.pipeline

bench-catchup: bootstrap ## sensor_aggregates draining a backlog on the demo's lab, beside a count-only ceiling
	@$(PY) -m bench.catchup --readings 2000000 --rounds 2

# 2 metrics every 0.2 s: 10 readings/s on every device, as bench.agent_footprint's agent.
BENCH_EMULATED_SENSORS := {"edge_agent_sensors": [{"type": "simulated", "interval": 0.2, "seed": 1, "metrics": ["temperature", "humidity"]}]}
bench-emulated: bootstrap artifacts ## the agent's RSS and CPU at 10 readings/s on emulated arm64 and armhf, beside a native one (its own lab)
	@cd roles/edge_agent && molecule create -s emulated && molecule converge -s emulated -- -e '$(BENCH_EMULATED_SENSORS)' \
	  && (cd ../.. && $(PY) -m bench.agent_emulated); rc=$$?; molecule destroy -s emulated; exit $$rc
