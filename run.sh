#!/usr/bin/env bash
# One entry point for a fresh clone: creates .venv, installs reopt with its test extras (building the
# native core from native/ with cargo when a Rust toolchain is present), then
#   bash run.sh demo [options]   runs the main job (reopt demo)
#   bash run.sh test [pytest options]   runs the test suite
# Set REOPT_PROFILE=deep for the long hypothesis profile.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.reopt-installed
want=$(cat setup.cfg pyproject.toml native/Cargo.toml native/Cargo.lock native/src/*.rs | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test]"
  echo "$want" > "$stamp"
fi
command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
  demo) exec .venv/bin/reopt demo "$@" ;;
  test) exec .venv/bin/python -m pytest "$@" ;;
  *) echo "usage: bash run.sh demo|test [options]" >&2; exit 2 ;;
esac
