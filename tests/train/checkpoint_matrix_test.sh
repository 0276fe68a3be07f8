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
one_rank=(--config "$source_dir/configs/smoke/tiny_mock.yaml" model.dynamic_context_parallel=false
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

# A full disk at several points of the save of iteration 6: exit 1 (the final save is lost,
# and says so), latest unchanged, and the folder still resumes from iteration 4.
# (The fault switch counts bytes written through the checkpoint's own files: state.json, about
# 300 bytes, then the manifest; 0 fails the first, 400 the manifest half-way.)
for bytes in 0 400; do
  fresh
  status=0
  DYNCP_FAULT_ENOSPC_AFTER_BYTES=$bytes run train.train_iters=6 checkpoint.save="$work/case" \
    >"$work/out.log" 2>&1 || status=$?
  cases=$((cases + 1))
  [[ $status -eq 1 ]] || fail "ENOSPC after $bytes bytes: exit $status, expected 1"
  grep -q "No space left on device" "$work/out.log" || fail "ENOSPC after $bytes bytes: not reported"
  [[ $(cat "$work/case/latest") == iter_0000004 ]] || fail "ENOSPC after $bytes bytes: latest moved"
  expect "after ENOSPC at $bytes bytes" "$work/case" 4
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
