#!/usr/bin/env bash
# Runs a command and checks its exit code and output (stdout and stderr together).
# usage: expect.sh EXIT_CODE REGEX COMMAND [ARGS...]
# Fails on a mismatch, and on any sign of a crash: the CLI must always exit with a message.
set -u
want_rc=$1
pattern=$2
shift 2
output=$("$@" 2>&1)
rc=$?
echo "$output"
if [[ "$rc" != "$want_rc" ]]; then
  echo "expect.sh: exit code $rc, expected $want_rc" >&2
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$output"; then
  echo "expect.sh: output does not match /$pattern/" >&2
  exit 1
fi
if grep -Eq 'terminate called|Aborted|Segmentation fault|core dumped|what\(\):' <<<"$output"; then
  echo "expect.sh: the program crashed instead of reporting an error" >&2
  exit 1
fi
