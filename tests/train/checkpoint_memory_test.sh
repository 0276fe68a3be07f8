#!/usr/bin/env bash
# Rank 0's memory during a save does not grow with the model, and every rank writes its share:
#   checkpoint_memory_test.sh BENCH_CHECKPOINT_SAVE
# bench_checkpoint_save on 2 ranks (EP 2, then tp 2) with 2 and with 8 MoE layers (2.8x the state): the
# rise of rank 0's peak resident memory during a sharded save and during the HF export stays
# the same (within 2 MiB) and far below rank 0's share of the state (no gathering, no copy of
# the state: each write comes straight from the buffers, or through one piece's buffer for the
# bf16 export); each rank writes within 10% of the total / 2.
set -euo pipefail
bench=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-ckpt-memory.XXXXXX")
trap 'rm -rf "$work"' EXIT
for layers in 2 8; do
  mpirun -np 2 "$bench" --out "$work/out" --hidden 256 --layers "$layers" --experts 8 \
    --vocab 4096 --repeats 2 >"$work/layers$layers.jsonl" 2>"$work/layers$layers.log" \
    || { cat "$work/layers$layers.log"; exit 1; }
done
python3 - "$work/layers2.jsonl" "$work/layers8.jsonl" <<'PY'
import json, sys
small, large = ({r["writer"]: r for r in map(json.loads, open(p))}
                for p in sys.argv[1:])
assert large["sharded"]["model_parameters"] > 2.5 * small["sharded"]["model_parameters"]
for writer in ("sharded", "hf_export"):
    a, b = small[writer], large[writer]
    rise_a, rise_b = a["rank0_peak_rss_rise_mib"], b["rank0_peak_rss_rise_mib"]
    share_mib = b["largest_rank_bytes"] / 2**20
    assert rise_b <= rise_a + 2, (writer, rise_a, rise_b)
    # The sharded save allocates nothing per element; the export one piece at a time (the
    # largest is the 4096 x 256 embedding: fp32 values plus their bf16 bytes), plus 4 MiB.
    bound = 0.25 * share_mib if writer == "sharded" else 6 * 4096 * 256 / 2**20 + 4
    assert rise_b <= bound, (writer, rise_b, bound)
    for r in (a, b):
        total = r["largest_rank_bytes"] + r["smallest_rank_bytes"]
        assert r["largest_rank_bytes"] <= 1.1 * total / 2 and r["smallest_rank_bytes"] >= 0.9 * total / 2, (writer, r)
    print(f"checkpoint_memory: {writer}: rank 0's peak RSS rose {rise_a} MiB and {rise_b} MiB "
          f"with {a['model_parameters']} and {b['model_parameters']} parameters "
          f"(its share of the larger: {share_mib:.1f} MiB); ranks within 10% of total / 2")
PY
# The same at tp 2 (each rank holds half of every split tensor and of every expert): the sharded
# save and the export as above, and the single writer, whose TP group sums one whole tensor (or
# one layer's experts) at a time for it, also rises the same with the larger model.
for layers in 2 8; do
  mpirun -np 2 "$bench" --out "$work/out" --hidden 256 --layers "$layers" --experts 8 \
    --vocab 4096 --repeats 2 --tp 2 >"$work/tp_layers$layers.jsonl" 2>"$work/tp_layers$layers.log" \
    || { cat "$work/tp_layers$layers.log"; exit 1; }
done
python3 - "$work/tp_layers2.jsonl" "$work/tp_layers8.jsonl" <<'PY'
import json, sys
small, large = ({r["writer"]: r for r in map(json.loads, open(p))}
                for p in sys.argv[1:])
assert large["sharded"]["tp"] == 2
for writer in ("sharded", "hf_export", "single"):
    a, b = small[writer], large[writer]
    rise_a, rise_b = a["rank0_peak_rss_rise_mib"], b["rank0_peak_rss_rise_mib"]
    assert rise_b <= rise_a + 2, (writer, rise_a, rise_b)
    # One whole tensor at a time: the 4096 x 256 embedding, a layer's 8 experts (6 MiB), the
    # writer's buffers; far below the 174 MiB the larger model's checkpoint holds.
    assert rise_b <= 32, (writer, rise_b)
    if writer != "single":
        total = b["largest_rank_bytes"] + b["smallest_rank_bytes"]
        assert b["largest_rank_bytes"] <= 1.1 * total / 2, (writer, b)
    print(f"checkpoint_memory: tp 2, {writer}: rank 0's peak RSS rose {rise_a} MiB and {rise_b} MiB "
          f"with {a['model_parameters']} and {b['model_parameters']} parameters")
PY
