# Both README commands go through scripts/setup.sh (idempotent).
.PHONY: setup quickstart test test-slow lint bench clean

setup:
	@bash scripts/setup.sh

quickstart: setup
	.venv/bin/fedad run configs/quickstart.toml --out runs/quickstart --force

test: setup
	.venv/bin/ruff check src tests benchmarks
	.venv/bin/ruff format --check src tests benchmarks
	.venv/bin/mypy
	.venv/bin/lint-imports --no-cache
	.venv/bin/pytest

test-slow: setup
	.venv/bin/pytest -m slow

bench: setup
	.venv/bin/python benchmarks/engine_overhead.py

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
