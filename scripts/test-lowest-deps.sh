#!/usr/bin/env bash
# Run the test suite against the lowest versions pyproject.toml allows for each direct
# dependency (uv's "lowest-direct" resolution), in a throwaway virtualenv: keeps the lower
# bounds honest. Usage: bash scripts/test-lowest-deps.sh [pytest args...]
# PostgreSQL tests run as in the normal suite (STATEFLOW_TEST_POSTGRES, or the private server).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q uv
"$venv/bin/python" -m uv pip install -q --python "$venv/bin/python" --resolution lowest-direct -e '.[test]'
echo "--- lowest direct dependencies:"
"$venv/bin/python" -m uv pip list --python "$venv/bin/python" 2>/dev/null \
  | grep -E -i '^(orjson|click|platformdirs|psycopg|psycopg-pool|jsonschema|jsonschema-rs|pydantic|mcp|anyio|fastapi|uvicorn|rich|jq) '
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
