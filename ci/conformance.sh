#!/usr/bin/env bash
# Run the backend conformance suite for every registered rammer backend.
# Backends that cannot run here (a GPU backend on a CPU box) get the
# compile-only checks; the suite skips the rest, saying why.
#   bash ci/conformance.sh [BACKEND...]      (default: every registered backend)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -gt 0 ]; then
    backends=("$@")
else
    mapfile -t backends < <(python -c 'import rammer.plugins as p; print("\n".join(sorted(p.backends())))')
fi
# Load the plugin with -p only until its pytest11 entry point is installed.
plugin_args=()
if ! python -c 'import importlib.metadata as m, sys
sys.exit(0 if any(e.value == "rammer.conformance.plugin" for e in m.entry_points(group="pytest11")) else 1)'; then
    plugin_args=(-p rammer.conformance.plugin)
fi
status=0
for backend in "${backends[@]}"; do
    echo "== conformance: $backend"
    # A fresh compile cache per backend, so cached entries of earlier runs prove nothing.
    RAMMER_CACHE_DIR="$(mktemp -d)" python -m pytest "${plugin_args[@]}" --pyargs rammer.conformance \
        --backend "$backend" -q -rfE -p no:cacheprovider || status=1
done
exit $status
