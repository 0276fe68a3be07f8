#!/usr/bin/env bash
# The checkpoint fault matrix, run by ctest as checkpoint_matrix:
#   checkpoint_matrix_test.sh DYNCP_TRAIN SOURCE_DIR
# Every damage a checkpoint folder can take — kill -9 during a save, a flipped bit, a zeroed
# block or a truncation in each file, an edited state.json, a full disk (ENOSPC) at several
# points of a save, a read-only or impossible save folder — must end in one of two outcomes:
# a verified resume (exit 0, "resumed from" a folder whose manifest verified) or an exit-2
# refusal whose message names the damaged file or the key. One rank, so the matrix stays cheap.
set -euo pipefail
train=$1
source_dir=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-matrix.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Single-writer checkpoints (format 2: model.safetensors, optimizer.safetensors); the matrix of
# sharded ones is sharded_checkpoint_np4 and e2e:sharded / e2e:async_save.
one_rank=(--config "$source_dir/configs/smoke/tiny_mock.yaml" checkpoint.sharded=false
          model.dynamic_context_parallel=false
          model.context_parallel_size=1 model.expert_model_parallel_size=1
          model.max_seqlen_per_dp_cp_rank=256 scheduler.lr_decay_iters=8)
run() { "$train" "${one_rank[@]}" "$@"; }
cases=0
fail() { echo "checkpoint_matrix: $*"; exit 1; }

# Resuming `dir` must give a verified resume from iteration `want`, or (want = refuse) exit 2
# naming `name`.
expect() {
  local label=$1 dir=$2 want=$3 name=${4:-}
  local status=0
  run train.train_iters=5 checkpoint.load="$dir" >"$work/out.log" 2>&1 || status=$?
  cases=$((cases + 1))
  if [[ $want == refuse ]]; then
    [[ $status -eq 2 ]] || fail "$label: exit $status, expected 2"
    grep -q -- "$name" "$work/out.log" || fail "$label: the refusal does not name $name"
  else
    [[ $status -eq 0 ]] || { tail -3 "$work/out.log"; fail "$label: exit $status, expected 0"; }
    grep -q "resumed from $dir/iter_000000$want at iteration $want" "$work/out.log" \
      || fail "$label: did not resume from iteration $want: $(grep -m1 -E 'resumed|warn' "$work/out.log")"
    [[ -z $name ]] || grep -q -- "$name" "$work/out.log" || fail "$label: no warning naming $name"
  fi
}

# A base folder with checkpoints at iterations 2 and 4.
run train.train_iters=4 checkpoint.save="$work/base" checkpoint.save_interval=2 >"$work/base.log" 2>&1
[[ $(cat "$work/base/latest") == iter_0000004 ]] || fail "base: latest is $(cat "$work/base/latest")"
fresh() { rm -rf "$work/case"; cp -r "$work/base" "$work/case"; }

expect "undamaged" "$work/base" 4

damage() {  # damage KIND FILE
  local size
  size=$(stat -c %s "$2")
  case $1 in
    bitflip) python3 -c 'import sys; p, at = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, "rb").read()); b[at] ^= 0x10; open(p, "wb").write(b)' "$2" $((size / 2)) ;;
    zeroblock) dd if=/dev/zero of="$2" bs=1 seek=$((size / 3)) count=$((size / 4 + 1)) conv=notrunc status=none ;;
    truncate) truncate -s $((size / 2)) "$2" ;;
  esac
}
# Every file of the newest checkpoint, each with another kind of damage: it is skipped with a
# warning naming it, and the older checkpoint loads.
kinds=(bitflip zeroblock truncate bitflip zeroblock)
files=(optimizer.safetensors model/model.safetensors state.json model/config.json manifest.json)
for i in "${!files[@]}"; do
  fresh
  damage "${kinds[$i]}" "$work/case/iter_0000004/${files[$i]}"
  expect "${kinds[$i]} ${files[$i]}" "$work/case" 2 "iter_0000004"
done
# Each kind of damage in the older one too: nothing verifies, exit 2 naming the damaged file.
for kind in bitflip zeroblock truncate; do
  fresh
  damage "$kind" "$work/case/iter_0000004/model/model.safetensors"
  damage "$kind" "$work/case/iter_0000002/optimizer.safetensors"
  expect "$kind in both" "$work/case" refuse "iter_0000002/optimizer.safetensors"
done

# state.json edited to another valid-looking state: the manifest catches it.
fresh
sed -i 's/"iteration": 4/"iteration": 20.5/' "$work/case/iter_0000004/state.json"
expect "state.json edited" "$work/case" 2 "iter_0000004/state.json"
# latest pointing out of the folder, or at nothing.
fresh
echo "../base/iter_0000004" >"$work/case/latest"
rm -rf "$work/case/iter_0000004"
expect "latest escapes the folder" "$work/case" 2 "latest"
fresh
: >"$work/case/latest"
expect "latest empty" "$work/case" 4 "latest"

# Checkpoints from before manifests (format 1: no manifest.json, no LR schedule in state.json)
# resume with a warning once their structure checks out; a damaged one is skipped like any
# folder that does not verify; the resumed run's own saves are format 2 with a manifest.
make_format1() {  # FOLDER: what a format-1 writer left
  rm "$1/manifest.json"
  python3 -c 'import json, sys
p = sys.argv[1]; s = json.load(open(p)); s["format"] = 1; del s["lr_scheduler"]
json.dump(s, open(p, "w"), indent=2)' "$1/state.json"
}
fresh
make_format1 "$work/case/iter_0000004"
make_format1 "$work/case/iter_0000002"
expect "format 1" "$work/case" 4 "iter_0000004: a format-1 checkpoint"
run train.train_iters=5 checkpoint.save="$work/case" >"$work/out.log" 2>&1 \
  || fail "format 1: resuming and saving failed: $(tail -1 "$work/out.log")"
grep -q '"format": 2' "$work/case/iter_0000005/state.json" && [[ -f $work/case/iter_0000005/manifest.json ]] \
  || fail "format 1: the resumed run's save is not format 2 with a manifest"
cases=$((cases + 1))
for file in optimizer.safetensors model/model.safetensors model/config.json; do
  fresh
  make_format1 "$work/case/iter_0000004"
  make_format1 "$work/case/iter_0000002"
  damage truncate "$work/case/iter_0000004/$file"
  expect "format 1, $file truncated" "$work/case" 2 "iter_0000004/$file"
done

# kill -9 at several moments of a run that saves every step: whatever was interrupted, the
# folder resumes from a verified checkpoint.
for delay in 0.7 1.1 1.5; do
  rm -rf "$work/killed"
  # Started directly (not through the run function) so $! is the trainer itself.
  "$train" "${one_rank[@]}" train.train_iters=100000 checkpoint.save="$work/killed" \
    checkpoint.save_interval=1 >"$work/kill.log" 2>&1 &
  pid=$!
  sleep "$delay"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [[ -s $work/killed/latest ]] || continue  # killed before the first save: nothing to resume
  status=0
  resume_iters=$(( $(sed 's/iter_0*//' "$work/killed/latest") + 1 ))
  run train.train_iters=$resume_iters checkpoint.save="$work/killed" >"$work/out.log" 2>&1 || status=$?
  cases=$((cases + 1))
  [[ $status -eq 0 ]] || fail "kill -9 after ${delay}s: resume exited $status"
  grep -q "resumed from $work/killed/iter_" "$work/out.log" || fail "kill -9 after ${delay}s: no resume"
done

# A failed write at several points of the save of iteration 6 must give exit 1 (the final
# save is lost, and says so) naming the file, leave latest unchanged and nothing partial (no
# temporary folder, no .partial file, no iter_0000006), and the folder still resumes from 4.
expect_failed_save() {  # LABEL REASON FILE
  local label=$1 reason=$2 file=$3
  cases=$((cases + 1))
  [[ $status -eq 1 ]] || { tail -3 "$work/out.log"; fail "$label: exit $status, expected 1"; }
  grep -q "$reason" "$work/out.log" || fail "$label: '$reason' not reported"
  grep -q "checkpoint at iteration 6 failed, the previous one is kept: .*$file.*$reason" \
    "$work/out.log" || fail "$label: the failure does not name $file"
  grep -q "the final checkpoint (iteration 6) could not be written" "$work/out.log" \
    || fail "$label: the lost final checkpoint is not reported"
  [[ $(cat "$work/case/latest") == iter_0000004 ]] || fail "$label: latest moved"
  local leftovers
  leftovers=$(find "$work/case" -name '.tmp_*' -o -name '*.partial' -o -name '.latest.tmp')
  [[ -z $leftovers ]] || fail "$label: partial files left: $leftovers"
  expect "after $label" "$work/case" 4
}
# Through the kernel: a file-size limit (ulimit -f, RLIMIT_FSIZE) makes the real write(2) of a
# checkpoint file fail with EFBIG (the trainer ignores SIGXFSZ, which would kill it unreported)
# half-way through model.safetensors, then half-way through optimizer.safetensors (the larger).
model_bytes=$(stat -c %s "$work/base/iter_0000004/model/model.safetensors")
optimizer_bytes=$(stat -c %s "$work/base/iter_0000004/optimizer.safetensors")
(( optimizer_bytes > model_bytes + 4096 )) || fail "optimizer.safetensors is not the larger file"
for target in model optimizer; do
  if [[ $target == model ]]; then
    limit_kib=$((model_bytes / 2048)) file=model/model.safetensors.partial
  else
    limit_kib=$(((model_bytes + optimizer_bytes) / 2048)) file=optimizer.safetensors.partial
  fi
  fresh
  status=0
  # PMIx's shared-memory store (a file larger than the limit) would fail MPI_Init: its hash
  # store keeps the limit for the checkpoint's files.
  (ulimit -f "$limit_kib" && PMIX_MCA_gds=hash exec "$train" "${one_rank[@]}" \
     train.train_iters=6 checkpoint.save="$work/case") >"$work/out.log" 2>&1 || status=$?
  expect_failed_save "a ${limit_kib} KiB file-size limit" "File too large" "$file"
done
# Through the fault switch (core/output_file.hpp): ENOSPC in the last files of the save —
# state.json, the manifest, and latest's temporary file (after the folder is in place).
for file in state.json manifest.json .latest.tmp; do
  fresh
  status=0
  DYNCP_FAULT_ENOSPC_FILE=$file DYNCP_FAULT_ENOSPC_AFTER_BYTES=0 run train.train_iters=6 \
    checkpoint.save="$work/case" >"$work/out.log" 2>&1 || status=$?
  if [[ $file == .latest.tmp ]]; then
    # The folder was complete and in place when latest failed: it verifies, latest does not
    # name it, and the resume takes latest's.
    [[ -f $work/case/iter_0000006/manifest.json ]] || fail "ENOSPC in latest: iter_0000006 lost"
    rm -rf "$work/case/iter_0000006"
  fi
  expect_failed_save "ENOSPC in $file" "No space left on device" "$file"
done

# Read-only or impossible save folders: refused at start-up, before any step.
echo x >"$work/a_file"
for folder in /proc/dyncp_matrix "$work/a_file/ckpt"; do
  status=0
  run train.train_iters=6 checkpoint.save="$folder" logger.metrics_path="$work/ro.jsonl" \
    >"$work/out.log" 2>&1 || status=$?
  cases=$((cases + 1))
  [[ $status -eq 2 ]] || fail "save folder $folder: exit $status, expected 2"
  grep -q "checkpoint.save: '$folder' is not writable" "$work/out.log" || fail "save folder $folder: not named"
  [[ ! -s $work/ro.jsonl ]] || fail "save folder $folder: training ran before the refusal"
done
echo "checkpoint_matrix: $cases cases, each a verified resume or an exit-2 refusal naming the file"
