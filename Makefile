.PHONY: demo test up bootstrap lint
demo: bootstrap  ## the main job: a local cluster running a real scenario
	.venv/bin/novaq demo
test:  ## the whole test suite (lint, unit, integration, real hypervisor)
	scripts/test
up: bootstrap  ## a local cluster in the foreground
	.venv/bin/novaq up
bootstrap:
	scripts/bootstrap
lint: bootstrap
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
