#!/usr/bin/env bash
# Usage: expect_job_abort.sh PATTERN COMMAND...
# Passes when COMMAND exits non-zero within 60 s and its output matches PATTERN (grep -E).
set -u
pattern=$1
shift
start=$(date +%s)
output=$(timeout 90 "$@" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output"
echo "exit status $status after ${elapsed} s"
if (( status == 0 )); then echo "FAIL: the job exited 0"; exit 1; fi
if (( status == 124 )); then echo "FAIL: the job was still running after 90 s"; exit 1; fi
if (( elapsed > 60 )); then echo "FAIL: the job took ${elapsed} s to end (limit 60 s)"; exit 1; fi
if ! grep -Eq -- "$pattern" <<<"$output"; then echo "FAIL: output does not match '$pattern'"; exit 1; fi
echo "PASS"
