.PHONY: demo test up bootstrap lint bench
demo: bootstrap  ## the main job: a local cluster running a real scenario
	.venv/bin/novaq demo
test:  ## the whole test suite (lint, unit, integration, real hypervisor)
	scripts/test
bench: bootstrap  ## every benchmark in bench/ (bench/*_bench.py), under 15 minutes in all
	scripts/bench
up: bootstrap  ## a local cluster in the foreground
	.venv/bin/novaq up
bootstrap:
	scripts/bootstrap
lint: bootstrap
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
