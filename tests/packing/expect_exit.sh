#!/usr/bin/env bash
# expect_exit.sh CODE REGEX COMMAND...: runs COMMAND, passes when it exits with CODE and its
# combined output matches the extended regular expression REGEX.
set -u
expected_code=$1
pattern=$2
shift 2
output=$("$@" 2>&1)
code=$?
if [[ $code -ne $expected_code ]]; then
  echo "expected exit $expected_code, got $code; output:"
  echo "$output"
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$output"; then
  echo "output does not match /$pattern/:"
  echo "$output"
  exit 1
fi
