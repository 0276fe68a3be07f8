#pragma once
// The attention contract (ops/attention.hpp: global positions, keys in any order and any block
// of a sequence) as blocks of contiguous positions, the form fused attention libraries take:
// a packed (THD) batch of blocks, each a run of consecutive query positions against a run of
// consecutive key positions, masked by one rule per call (cuDNN's diagonal band, aligned to
// each block's bottom-right corner). A query that sees several blocks (zigzag halves, a key run
// split by the CP layout) gets one partial result per call, folded by lse (attention_merge), as
// the CP ring folds its key blocks.
//
// Inside a block of sq query rows and skv key rows, query row i has position q0 + i and key row
// j position k0 + j; its bottom-right diagonal is d(i) = i + skv − sq. Key j is visible to
// query i iff
//   causal: j <= d(i)   (the block's last query and last key share a position)
//   full:   always      (every key is below every query)
// and, with left_bound L > 0, also d(i) − j < L. For a causal block L is the sliding window;
// for a full block it is the window less the gap between the block's ends. Every query row of
// a block sees at least one of its keys (a fused kernel's output for a row that sees nothing
// is not defined), and every visible (query, key) pair of the layout is in exactly one block
// of one call (tests/ops/attention_blocks_test.cpp checks both on CP layouts).

#include <cstdint>
#include <vector>

#include "ops/attention.hpp"

namespace dyncp::ops {

enum class AttentionBlockMask { causal, full };

struct AttentionBlock {
  std::int32_t q_row = 0, q_rows = 0;    // rows [q_row, q_row + q_rows) of q / out / lse
  std::int32_t kv_row = 0, kv_rows = 0;  // rows [kv_row, kv_row + kv_rows) of k / v
};

// One library call: blocks with the same mask rule, no two sharing a query row (forward) or,
// when planned for the backward, a query row or a key row (each call writes its dQ, dK, dV).
struct AttentionBlockCall {
  AttentionBlockMask mask = AttentionBlockMask::causal;
  std::int32_t left_bound = 0;  // 0: none
  std::vector<AttentionBlock> blocks;
  std::int32_t max_q_rows = 0, max_kv_rows = 0;
};

struct AttentionBlockPlan {
  std::vector<AttentionBlockCall> calls;
  // Whether some query row is in more than one call (the partial results need merging).
  bool merges = false;
};

// From the layout's host tensors (cu_seqlens and positions on the host). disjoint_keys: no
// two blocks of a call share a key row (the backward's dK / dV).
AttentionBlockPlan plan_attention_blocks(const VarlenAttentionLayout& layout, bool disjoint_keys);

// The rule above for one pair of a block (for tests and the docs).
bool attention_block_sees(const AttentionBlockCall& call, const AttentionBlock& block,
                          std::int32_t i, std::int32_t j);

}  // namespace dyncp::ops
