# A newcomer runs two commands (README.md): `make demo` and `make test`.
# Downloads are cached under the home directory: pip in ~/.cache/pip, Maven in ~/.m2,
# the Kafka jars, the versitygw binary and the browser tests' npm packages in
# ~/.cache/spotcap.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install checkpoint-integrations lint format kafka-jars promtool alertmanager versitygw kube-apiserver toxiproxy system-packages browser-tools bench clean

$(STAMP): pyproject.toml setup.py streams/_framing.c schemas/_avro_write.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## The checkpoint client's framework integrations for their tests (torch, pyspark: large, so not
## in `make install`); pip keeps the downloads in ~/.cache/pip.
INTEGRATIONS_STAMP := $(VENV)/.checkpoint-integrations
$(INTEGRATIONS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,checkpoint-integrations]'
	touch $(INTEGRATIONS_STAMP)

checkpoint-integrations: $(INTEGRATIONS_STAMP)

## Run the main job on the embedded default (everything under ./.spotcap). A rerun replaces what a
## demo wrote and says so; it refuses to delete anything else (contracts published by hand).
demo: install
	$(BIN)/spotcap demo --fresh

## Install everything the tests need, then run the whole suite; the tests start the servers
## (Kafka in KRaft mode from Maven Central jars, PostgreSQL, NATS, OpenBao, versitygw, Slurm,
## kube-apiserver over etcd) through infra/servers/. promtool (which lints /metrics) comes with
## Debian's prometheus package. Two workers (pytest-xdist), each given whole test files: most
## of the suite waits on the servers it starts, and a file's module fixtures then run once.
test: install checkpoint-integrations kafka-jars promtool alertmanager versitygw kube-apiserver toxiproxy system-packages browser-tools
	$(BIN)/pytest -n 2 --dist loadfile

## Debian packages the tests use: lua5.4 runs the Slurm job_submit filter (infra/admission);
## slurm-wlm, slurmrestd and munge are the real one-node Slurm the agent's drain tests use;
## etcd-server is the store of the real kube-apiserver (openssl makes its signing key).
system-packages:
	@command -v lua5.4 >/dev/null || { \
		echo "installing lua5.4 from Debian (needs root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.4; }
	@test -x /usr/sbin/slurmrestd -a -x /usr/sbin/slurmctld -a -x /usr/sbin/munged || { \
		echo "installing slurm-wlm, slurmrestd and munge from Debian (needs root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			slurm-wlm slurmrestd munge; }
	@test -x /usr/bin/etcd -a -x /usr/bin/openssl || { \
		echo "installing etcd-server and openssl from Debian (needs root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			etcd-server openssl; }

## The console's browser tests: Debian's chromium (no browser download), driven by playwright-core
## with axe-core for accessibility, both from npm, installed once under ~/.cache/spotcap/node.
NODE_DIR := $(HOME)/.cache/spotcap/node
PLAYWRIGHT_CORE := 1.65.1
AXE_CORE := 4.14.1

browser-tools:
	@test -x /usr/bin/chromium || { \
		echo "installing chromium from Debian (needs root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@command -v npm >/dev/null || { \
		echo "installing nodejs and npm from Debian (needs root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	@grep -qs '"version": "$(PLAYWRIGHT_CORE)"' $(NODE_DIR)/node_modules/playwright-core/package.json \
		&& grep -qs '"version": "$(AXE_CORE)"' $(NODE_DIR)/node_modules/axe-core/package.json \
		|| { mkdir -p $(NODE_DIR) && npm install --no-audit --no-fund --prefix $(NODE_DIR) \
			playwright-core@$(PLAYWRIGHT_CORE) axe-core@$(AXE_CORE); }

kafka-jars: install
	$(BIN)/python -m infra.servers fetch-kafka

promtool: install
	@command -v promtool >/dev/null || { \
		echo "installing prometheus (for its promtool) from Debian (needs root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus; }
	$(BIN)/python -m infra.servers fetch-promtool

## Alertmanager and amtool (the alarms' routing, infra/alerts/) from Debian's
## prometheus-alertmanager package: its Go module leaves out the web assets it embeds, so it
## does not build from the Go module proxy (infra/servers/alertmanager.py). Prometheus itself
## comes with promtool above.
alertmanager: install promtool
	@command -v prometheus-alertmanager >/dev/null && command -v amtool >/dev/null || { \
		echo "installing prometheus-alertmanager (with amtool) from Debian (needs root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			prometheus-alertmanager; }
	$(BIN)/python -m infra.servers fetch-alertmanager
	$(BIN)/python -m infra.servers fetch-amtool
	$(BIN)/python -m infra.servers fetch-prometheus

## The S3 server of the archive's Object Lock tests, built once with go install (~8 min of CPU).
versitygw: install
	$(BIN)/python -m infra.servers fetch-versitygw

## The Kubernetes API server of the drain, intake and admission tests, built once with go build
## in infra/kubernetes/apiserver (~10 min of CPU the first time, seconds with Go's cache warm).
kube-apiserver: install
	$(BIN)/python -m infra.servers fetch-kube-apiserver

## Toxiproxy, the network faults of tests/faults/ (latency, a black-holed link, resets) on
## loopback, built once with go install (~15 s of CPU): the kernel here has no netem.
toxiproxy: install
	$(BIN)/python -m infra.servers fetch-toxiproxy

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy --strict tests bench infra

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install kafka-jars
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/log.py

clean:
	rm -rf $(VENV) .spotcap .pytest_cache .mypy_cache .ruff_cache
