#!/usr/bin/env bash
# A prepared-cache write that the kernel refuses (a file-size limit, `ulimit -f`: the real
# write(2) fails with EFBIG) stops dyncp-data prepare with exit 1 naming the file, and leaves
# no cache and no temporary behind; without the limit the same command prepares a cache that
# reads back whole.
#   prepare_write_failure_test.sh DYNCP_DATA SOURCE_DIR
set -euo pipefail
data=$1
fixture=$2/tests/fixtures/data/demo
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-prepare-fault.XXXXXX")
trap 'rm -rf "$work"' EXIT
prepare=("$data" prepare --tokenizer "$fixture/tokenizer" --input "$fixture/train.jsonl"
         --cache-dir "$work/cache")
fail() { echo "prepare_write_failure: $*"; cat "$work/log" 2>/dev/null; exit 1; }

status=0
(ulimit -f 4 && exec "${prepare[@]}") >"$work/log" 2>&1 || status=$?
[[ $status -eq 1 ]] || fail "a cache past ulimit -f 4 (4 KiB) exited $status, expected 1"
grep -q "prepared-.*: File too large" "$work/log" || fail "the error does not name the file"
left=$(find "$work/cache" -type f ! -name '*.lock')
[[ -z $left ]] || fail "left behind: $left"

"${prepare[@]}" >"$work/log" 2>&1 || fail "the unlimited run failed"
grep -Eq "samples +40" "$work/log" || fail "the unlimited run did not read back 40 samples"
echo "prepare_write_failure: ulimit -f 4 -> exit 1 naming the file, nothing left; unlimited -> 40 samples"
