# Quick start: `make demo` (the whole loop in the local sandbox) and `make test`.
# Both create .venv with Python 3.11+ and install the pinned dependencies: the Amazon MWAA 3.3.1 image's packages
# (constraints/mwaa-3.3.1.txt, taken first) and the workload/infra/dev pins (constraints.txt).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
MWAA_VERSION ?= 3.3.1
MWAA_CONSTRAINTS := constraints/mwaa-$(MWAA_VERSION).txt
CONSTRAINTS := -c $(MWAA_CONSTRAINTS) -c constraints.txt
CDK_CLI := infra/node_modules/.bin/cdk
# infra/node_modules as installed from this package.json + lock (named by their hash, like the venvs' stamps)
CDK_STAMP := infra/node_modules/.installed-$(shell cat infra/package.json infra/package-lock.json | sha256sum | cut -c1-12)
# The venv's stamps are named by the hash of what they install: the demo's set (requirements-demo.txt: the Airflow
# side, the workloads, the sandbox) and the whole development set (requirements-dev.txt: the demo's, plus tests,
# lint, CDK, the browser driver, Stable-Baselines3), which includes the demo's.
DEMO_STAMP := $(VENV)/.installed-demo-$(shell cat requirements.txt requirements-demo.txt requirements-workload.txt constraints.txt $(MWAA_CONSTRAINTS) pyproject.toml | sha256sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-demo.txt requirements-dev.txt requirements-lint.txt requirements-workload.txt requirements-infra.txt constraints.txt $(MWAA_CONSTRAINTS) pyproject.toml | sha256sum | cut -c1-12)

.PHONY: install install-demo demo test test-unit test-fast bench faults ui lint clean

$(STAMP):
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -r requirements-dev.txt $(CONSTRAINTS)
	$(BIN)/python -m pip check
	$(BIN)/python -m pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-* && touch $@ $(DEMO_STAMP)

$(DEMO_STAMP):
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -r requirements-demo.txt $(CONSTRAINTS)
	$(BIN)/python -m pip check
	$(BIN)/python -m pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-demo-* && touch $@

## The whole development set (make test, make bench, make synth, ...).
install: $(STAMP)

## What make demo, make ui and make faults need: the Airflow side, the workloads and the sandbox (no test, lint,
## browser, CDK or Stable-Baselines3 package; `make install` adds them to the same .venv).
install-demo: $(DEMO_STAMP)

## Run the sim_to_real DAG end to end against the local AWS sandbox (no AWS account needed), tracked in a local
## MLflow server (its venv: mlflow-venv; DEMO_ARGS=--no-mlflow for an untracked run).
demo: install-demo mlflow-venv
	$(BIN)/python -m sim2real.dev.demo $(DEMO_ARGS)

## The whole test suite (unit, operators, workloads, edge, sandbox, DAG integrity, end-to-end, browser).
## Test processes (pytest-xdist; whole files per process: a file's DAG runs share their fixtures). Three on 2 cores
## keep the cores busier than two (75 % -> 91 %; 19 min 40 s -> 16 min 54 s, 2026-12-04): the files that wait
## (live Airflow stacks, SSM round trips) leave a core idle otherwise.
PYTEST_WORKERS ?= 3
## make test-unit's processes: one more than the 2 cores, for the tests that wait (SQS long polls, torchrun
## launches): 2 min 4 s with 2, 1 min 42 s with 3, 1 min 43 s with 4 (1750 tests, quiet 2-core machine, 2026-12-04).
UNIT_WORKERS ?= 3
## The venvs in .venv/ the suite uses are built before pytest starts (the SageMaker SDK's .venv/pipeline for
## tests/pipelines/test_pipeline_venv.py too: about 1 GB, a minute of pip on a fresh clone). The MWAA package check
## still builds dist/mwaa-check/venv in its test: installing the bundle the way MWAA does is what it checks.
test: install mlflow-venv lerobot-site pipeline-venv browser-deps $(CDK_STAMP) lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

## The inner loop: the unit tests, every test that needs no sandbox, server, Airflow metadata DB or browser
## (-m "not integration"; tests/conftest.py fails a unit test that starts one). No install beyond the venv.
test-unit: install
	$(BIN)/python -m pytest -n $(UNIT_WORKERS) --dist loadfile --no-loadscope-reorder -m "not integration" $(PYTEST_ARGS)

## Before a push: lint, then the unit tests (make test runs everything).
test-fast: lint test-unit

## Forward compatibility: tests/orchestration/operators and tests/orchestration/dags on the newest Amazon and standard provider releases, in
## their own venv (.venv-latest: the workload/infra/dev pins, the Airflow side resolved to the newest releases).
LATEST_VENV := .venv-latest
.PHONY: test-latest
test-latest:
	rm -rf $(LATEST_VENV)
	$(PY) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(LATEST_VENV)/bin/python -m pip install -q -r requirements-dev.txt -c constraints.txt
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade "apache-airflow-providers-amazon[aiobotocore]" \
	  apache-airflow-providers-standard -c constraints.txt
	$(LATEST_VENV)/bin/python -m pip check
	$(LATEST_VENV)/bin/python -m pip install -q --no-deps -e .
	@$(LATEST_VENV)/bin/python -m pip list 2>/dev/null | grep -E "^(apache-airflow-providers-(amazon|standard)|boto3|aiobotocore) "
	$(LATEST_VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder tests/orchestration/operators tests/orchestration/dags $(PYTEST_ARGS)

## Benchmarks: printed as a table, written to bench-results.json (DAG parse vs a plain-provider DAG,
## orchestration latency / worker-slot seconds / API calls from one sandbox run, trainer, policy server, and
## policy quality after 60 s / 120 s of training, ours vs Stable-Baselines3 PPO, 3 seeds each: ~15 minutes).
## BENCH_ARGS="--only rl --rl-budgets 30,60 --rl-seeds 3" for a shorter policy-quality run alone.
bench: install
	$(BIN)/python -m sim2real.dev.bench $(BENCH_ARGS)

## Fault replay: every failure mode the sandbox injects, in one sandbox run; results in .sandbox/faults-results.json.
faults: install-demo
	$(BIN)/python -m sim2real.dev.faults --json-out .sandbox/faults-results.json --markdown

## The Airflow UI (airflow standalone: scheduler, dag-processor, triggerer, API server) against the local
## AWS sandbox, at http://127.0.0.1:8080 (no login: local sandbox, every visitor is admin), and the MLflow UI of
## the sandbox's tracking server (its URL is printed; compare runs there). Ctrl-C stops both.
ui: install-demo mlflow-venv
	$(BIN)/python -m sim2real.dev.ui $(UI_ARGS)

## Chromium from Debian for the browser test (tests/dev/ui/), installed only when `chromium` is not on PATH.
.PHONY: browser-deps
browser-deps:
	@command -v chromium >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else \
	  echo "browser-deps: chromium is not on PATH and installing it needs root or sudo: the browser test will be skipped"; exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "browser-deps: chromium is not on PATH and there is no apt-get: install chromium yourself, or the browser test will be skipped"; exit 0; fi; \
	echo "browser-deps: installing chromium (Debian package)"; \
	{ $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; } \
	  || echo "browser-deps: could not install chromium (see above): the browser test will be skipped"

## Lint (about 20 s on a fresh clone, most of it building .venv-lint; `make test` runs it first): ruff
## (pyproject.toml [tool.ruff]: pyflakes, pycodestyle errors, bugbear, the Airflow AIR rules, ...), the import
## contracts between the runtime packages (lint-imports: [tool.importlinter]), and no reference to a document outside
## the repository (scripts/check_references.py). Its own small venv, .venv-lint (requirements-lint.txt: ruff,
## import-linter and their dependencies, about 70 MB), not the dev venv: import-linter reads imports statically
## (grimp), so the imported packages need not be installed; PYTHONPATH=include finds the sim2real package.
LINT_PATHS := dags include plugins scripts infra tests
LINT_VENV := .venv-lint
LINT_STAMP := $(LINT_VENV)/.installed-$(shell cat requirements-lint.txt constraints.txt $(MWAA_CONSTRAINTS) | sha256sum | cut -c1-12)

# The venv without a pip of its own when $(PY)'s pip can install into another interpreter (pip >= 22.3: --python);
# that skips ensurepip, about half of the build on a busy machine.
$(LINT_STAMP):
	rm -rf $(LINT_VENV)
	@if $(PY) -m pip --python $(PY) --version >/dev/null 2>&1; then \
	  set -x; $(PY) -m venv --without-pip $(LINT_VENV) && PIP="$(PY) -m pip --python $(LINT_VENV)/bin/python"; \
	else \
	  set -x; $(PY) -m venv $(LINT_VENV) && PIP="$(LINT_VENV)/bin/python -m pip"; \
	fi; \
	$$PIP install -q -r requirements-lint.txt $(CONSTRAINTS) && $$PIP check
	touch $@

.PHONY: lint-venv
lint-venv: $(LINT_STAMP)

lint: $(LINT_STAMP)
	$(LINT_VENV)/bin/ruff check $(LINT_PATHS)
	PYTHONPATH=include$${PYTHONPATH:+:$$PYTHONPATH} $(LINT_VENV)/bin/lint-imports --no-cache
	$(LINT_VENV)/bin/python scripts/check_references.py

## One wheel per runtime in dist/wheels/ (sim2real-contract, -workloads, -orchestration, -edge; scripts/build_wheels.py).
.PHONY: wheels
wheels: install
	$(BIN)/python scripts/build_wheels.py --out dist/wheels

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(LINT_VENV) .sandbox .pytest_cache

# ---------------------------------------------------------------------------------------------
# GR00T pipeline definition (SageMaker Python SDK v3, about 1 GB: its own venv .venv/pipeline, never the Airflow
# runtime's). `make pipeline-definition` regenerates include/sim2real/orchestration/pipelines/
# groot_pipeline.template.json (committed); the DAG fills in account values at run time.
PIPELINE_VENV := $(VENV)/pipeline
PIPELINE_STAMP := $(PIPELINE_VENV)/.installed-$(shell cat requirements-pipeline.txt | sha256sum | cut -c1-12)

# The stamp's name carries the lock file's hash: a changed lock builds anew, a fresh checkout (newer mtimes) does not.
$(PIPELINE_STAMP):
	rm -rf $(PIPELINE_VENV)
	$(PY) -m venv $(PIPELINE_VENV)
	$(PIPELINE_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(PIPELINE_VENV)/bin/python -m pip install -q --no-deps -r requirements-pipeline.txt
	$(PIPELINE_VENV)/bin/python -m pip check
	touch $@

.PHONY: pipeline-venv pipeline-definition
pipeline-venv: $(PIPELINE_STAMP)

## Regenerate the GR00T pipeline definition template with the SageMaker SDK (offline, no AWS call).
pipeline-definition: $(PIPELINE_STAMP)
	PYTHONPATH=include $(PIPELINE_VENV)/bin/python -m sim2real.dev.pipeline_build --out include/sim2real/orchestration/pipelines/groot_pipeline.template.json

.PHONY: package synth deploy

## MWAA bundle in dist/mwaa/ (dags/, plugins.zip, requirements.txt, startup.sh), then checked on a clean
## venv built only from its requirements.txt (DagBag parse, no import errors; venv kept in dist/mwaa-check).
package: install
	$(BIN)/python scripts/package_mwaa.py build --out dist/mwaa
	$(BIN)/python scripts/package_mwaa.py check --out dist/mwaa --workdir dist/mwaa-check

## The AWS CDK CLI pinned in infra/package.json (npm ci; Node.js 20+). Only the CLI reads infra/cdk.json's context.
$(CDK_STAMP):
	@command -v npm >/dev/null 2>&1 || { echo "cdk-cli: npm is not on PATH: install Node.js 20+ (the CDK CLI tests are skipped)"; exit 0; }; \
	cd infra && npm ci --no-audit --no-fund --loglevel=error && touch $(CDK_STAMP:infra/%=%)

## Synthesize the CDK app offline into infra/cdk.out through the CDK CLI (cdk.json's context and feature flags;
## cdk-nag AwsSolutions checks fail it on any finding), then cfn-lint every template.
synth: install $(CDK_STAMP)
	cd infra && CDK_DISABLE_VERSION_CHECK=1 JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 \
	  node_modules/.bin/cdk synth --app "../$(BIN)/python app.py" --no-notices --no-version-reporting -q
	$(BIN)/cfn-lint infra/cdk.out/*.template.json

## Deploy to the account of the current AWS credentials (needs the AWS CLI and the CDK CLI via npx;
## bootstrapped account). Order: buckets first, then the bundles they must hold, then everything.
CDK := cd infra && JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 node_modules/.bin/cdk --app "../$(BIN)/python app.py"
ACCOUNT = $(shell aws sts get-caller-identity --query Account --output text)
deploy: package $(CDK_STAMP)
	$(CDK) deploy --require-approval broadening Sim2realNetwork Sim2realStorage
	$(BIN)/python scripts/build_wheels.py --out dist/wheels contract edge
	$(BIN)/python scripts/package_mwaa.py upload-greengrass --bucket sim2real-artifacts-$(ACCOUNT) --wheel-dir dist/wheels
	$(BIN)/python scripts/package_mwaa.py upload --out dist/mwaa --bucket sim2real-mwaa-$(ACCOUNT)
	$(CDK) deploy --require-approval broadening --all

# ---------------------------------------------------------------------------------------------
# LeRobot's own v2.1 dataset reader (lerobot==0.3.3, which pins torch<2.8) for tests/pipelines/sdk/
# test_lerobot_v21_reader.py: requirements-lerobot.txt installed with --no-deps into a directory (.venv/lerobot,
# about 210 MB, PyAV and pandas most of it; 10 s from a warm pip cache) that tests/pipelines/test_lerobot_reader.py
# puts on PYTHONPATH over the dev venv's torch. Named by the lock file's hash, as the other venvs.
LEROBOT_SITE ?= $(VENV)/lerobot
LEROBOT_STAMP := $(LEROBOT_SITE)/.installed-$(shell cat requirements-lerobot.txt | sha256sum | cut -c1-12)

$(LEROBOT_STAMP): | $(STAMP)
	rm -rf $(LEROBOT_SITE)
	$(BIN)/python -m pip install -q --no-deps --target $(LEROBOT_SITE) -r requirements-lerobot.txt
	touch $@

.PHONY: lerobot-site
lerobot-site: $(LEROBOT_STAMP)

# ---------------------------------------------------------------------------------------------
# The sandbox's MLflow tracking server (`mlflow server`, the full mlflow package) in its own venv .venv/mlflow:
# mlflow's graphene 3 needs graphql-core<3.3, the dev venv pins graphql-core 3.3.2 (moto's). The dev venv and
# the images have the client only (mlflow-skinny, requirements-workload.txt), at this server's version.
MLFLOW_VENV := $(VENV)/mlflow
MLFLOW_STAMP := $(MLFLOW_VENV)/.installed-$(shell cat requirements-mlflow-server.txt | sha256sum | cut -c1-12)

# Named by the lock file's hash, as the pipeline venv's stamp: no rebuild for a newer mtime alone.
$(MLFLOW_STAMP):
	rm -rf $(MLFLOW_VENV)
	$(PY) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(MLFLOW_VENV)/bin/python -m pip install -q --no-deps -r requirements-mlflow-server.txt
	$(MLFLOW_VENV)/bin/python -m pip check
	touch $@

.PHONY: mlflow-venv
mlflow-venv: $(MLFLOW_STAMP)
