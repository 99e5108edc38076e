#!/usr/bin/env bash
# The distributed lock's fault workload (benchmarks/faults/README.md):
#   bash benchmarks/faults/run.sh --short [--check]   every scenario once, well under a minute
#   bash benchmarks/faults/run.sh --long [--markdown FILE]
#                                                     40 s per scenario, 6 clients: the docs' table
# Private PostgreSQL and Redis servers are started (and stopped) by scripts/servers.sh. Python is
# $PYTHON, else the project's .venv (bash scripts/setup.sh makes it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON=${PYTHON:-$here/../../.venv/bin/python}
exec "$PYTHON" "$here/faults.py" "$@"
