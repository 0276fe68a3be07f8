#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh" -DDYNCP_TESTS=ON
cd "${DYNCP_BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 600 -j "${DYNCP_TEST_JOBS:-2}" "$@"
# libFuzzer over every committed corpus, a bounded time per target (tools/fuzz.sh).
"$root/tools/fuzz.sh"
