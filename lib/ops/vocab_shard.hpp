#pragma once
// The vocabulary rows a tensor-parallel rank holds of the embedding table and of the LM head.
// Under tensor parallelism TP rank r of tp holds rows [first, first + V_local) of the whole
// [V, h] tables (V_local = V / tp, first = r · V_local); the shard's own row count is the row
// count of the table it comes with, so the range only carries where it starts and how large the
// whole vocabulary is. Token ids and labels stay whole-vocabulary ids everywhere: an op maps id
// to local row id − first, and checks ids against vocab_size (a bad id is a data error whichever
// shard sees it). The whole vocabulary is the shard {0, V}.
//
// Example: V = 12, tp = 3: rank 1 holds {first 4, vocab_size 12} with a [4, h] table, so id 5
// is its row 1, and ids 0-3 and 8-11 belong to the other ranks.

#include <cstdint>

namespace dyncp::ops {

struct VocabShardRange {
  std::int64_t first = 0;       // first whole-vocabulary id held here
  std::int64_t vocab_size = 0;  // the whole vocabulary V (labels / ids are checked against it)
};

}  // namespace dyncp::ops
