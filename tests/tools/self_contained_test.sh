#!/usr/bin/env bash
# The repository needs nothing beside it: tools/test.sh on a fresh clone with no sibling folders
# must find every file the build and the tests read inside the clone.
#
#   self_contained_test.sh SOURCE_ROOT
#
# 1. No test, CMake file, tool or recipe names a path outside the repository (`../shared`,
#    `shared/tokenizers`, a parent of the project source dir).
# 2. The tracked tree copied alone into an empty folder configures with tests on, and nothing the
#    configured build or its test list refers to lies outside the copy (or in the original
#    checkout's parent folder, where sibling folders would live).
set -euo pipefail
root=$(cd "$1" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 1. References that leave the repository.
cd "$root"
scanned=(CMakeLists.txt cmake tests tools configs apps lib)
pattern='\.\./shared|shared/tokenizers|DYNCP_SHARED_DIR|PROJECT_SOURCE_DIR\}/\.\.|CMAKE_SOURCE_DIR\}/\.\.'
# This script spells the patterns out; it is the one file allowed to.
if hits=$(grep -rnE "$pattern" "${scanned[@]}" --exclude=self_contained_test.sh \
            --exclude-dir=fixtures 2>/dev/null); then
  fail "paths outside the repository:"
  echo "$hits"
fi
for file in tests/fixtures/tokenizers/qwen3/{tokenizer.json,tokenizer_config.json,LICENSE,NOTICE.md}; do
  [[ -s "$file" ]] || fail "$file is missing (the tests' Qwen3 tokenizer and its Apache-2.0 notice)"
done

# 2. A lone copy configures and refers to nothing outside itself.
scratch=$(mktemp -d /tmp/dyncp_self_contained.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
clone="$scratch/clone"
mkdir -p "$clone"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked files plus new ones not yet committed (what the next commit will hold).
  git -C "$root" ls-files -z --cached --others --exclude-standard |
    (cd "$root" && xargs -0 cp --parents -t "$clone" 2>/dev/null || true)
else
  (cd "$root" && tar --exclude='./build*' --exclude='./runs' -cf - .) | tar -C "$clone" -xf -
fi
[[ -f "$clone/CMakeLists.txt" ]] || fail "the copy of the tree has no CMakeLists.txt"
if ! cmake -S "$clone" -B "$clone/build" -DDYNCP_TESTS=ON -DDYNCP_CUDA=OFF \
       >"$scratch/configure.log" 2>&1; then
  cat "$scratch/configure.log"
  fail "a lone copy of the repository does not configure"
else
  # Every absolute path in the generated build and test files must be inside the copy or a
  # system location; the original checkout and its parent (where ../shared lived) must not appear.
  parent=$(dirname "$root")
  if hits=$(grep -rlF -e "$root/" -e "$parent/shared" "$clone/build" --include='*.cmake' \
              --include='build.ninja' --include='Makefile' --include='*.txt' 2>/dev/null); then
    fail "the copy's build refers to the original checkout or its siblings: $hits"
  fi
  listed=$(cd "$clone/build" && ctest -N 2>/dev/null | grep -c 'Test *#' || true)
  ((listed > 0)) || fail "the copy's build registers no tests"
  echo "lone copy configured in $scratch; ctest -N lists $listed tests before discovery"
fi

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "self-contained: ok"
