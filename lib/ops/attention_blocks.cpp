#include "ops/attention_blocks.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace dyncp::ops {
namespace {

// A run of rows holding consecutive positions [pos, pos + rows).
struct Run {
  std::int32_t row, pos, rows;
};

std::vector<Run> runs_of(const std::int32_t* positions, std::int32_t begin, std::int32_t end) {
  std::vector<Run> runs;
  for (std::int32_t r = begin; r < end; ++r) {
    if (!runs.empty() && positions[r] == runs.back().pos + runs.back().rows &&
        r == runs.back().row + runs.back().rows) {
      ++runs.back().rows;
    } else {
      runs.push_back({r, positions[r], 1});
    }
  }
  return runs;
}

struct Piece {
  AttentionBlockMask mask;
  std::int32_t left_bound;
  AttentionBlock block;
};

// The pieces of one query run against one key run (positions [a, b) and [c, d)).
void pieces_of(const Run& q, const Run& k, std::int32_t window, std::vector<Piece>& out) {
  const std::int32_t a = q.pos, b = q.pos + q.rows, c = k.pos, d = k.pos + k.rows;
  const auto block = [&](std::int32_t q_lo, std::int32_t q_hi, std::int32_t k_lo,
                         std::int32_t k_hi) {
    return AttentionBlock{q.row + (q_lo - a), q_hi - q_lo, k.row + (k_lo - c), k_hi - k_lo};
  };
  // Queries inside the key run see the keys up to their own position: ends aligned. With a
  // window, keys too far behind the first of them are seen by none.
  const std::int32_t lo = std::max(a, c), m = std::min(b, d);
  if (lo < m) {
    const std::int32_t k_lo = window > 0 ? std::max(c, lo - window + 1) : c;
    const bool cut = window > 0 && (m - 1) - k_lo >= window;
    out.push_back({AttentionBlockMask::causal, cut ? window : 0, block(lo, m, k_lo, m)});
  }
  // Queries past the key run see all of it (a window: those less than w past its last key).
  const std::int32_t qa = std::max(a, d);
  const std::int32_t qb = window > 0 ? std::min(b, d - 1 + window) : b;
  if (qa < qb) {
    const std::int32_t k_lo = window > 0 ? std::max(c, qa - window + 1) : c;
    const bool cut = window > 0 && (qb - 1) - k_lo >= window;
    out.push_back({AttentionBlockMask::full, cut ? window - (qb - d) : 0, block(qa, qb, k_lo, d)});
  }
}

bool overlaps(std::int32_t a, std::int32_t n, std::int32_t b, std::int32_t m) {
  return a < b + m && b < a + n;
}

bool fits(const AttentionBlockCall& call, const Piece& piece, bool disjoint_keys) {
  if (call.mask != piece.mask || call.left_bound != piece.left_bound) return false;
  for (const AttentionBlock& other : call.blocks) {
    if (overlaps(other.q_row, other.q_rows, piece.block.q_row, piece.block.q_rows)) return false;
    if (disjoint_keys &&
        overlaps(other.kv_row, other.kv_rows, piece.block.kv_row, piece.block.kv_rows))
      return false;
  }
  return true;
}

}  // namespace

AttentionBlockPlan plan_attention_blocks(const VarlenAttentionLayout& layout, bool disjoint_keys) {
  for (const Tensor* t :
       {&layout.q_cu_seqlens, &layout.kv_cu_seqlens, &layout.q_positions, &layout.kv_positions}) {
    if (t->device() != Device::cpu) {
      core::throw_runtime_error("plan_attention_blocks: needs the layout on the host");
    }
  }
  const std::int32_t* q_cu = layout.q_cu_seqlens.data<std::int32_t>();
  const std::int32_t* kv_cu = layout.kv_cu_seqlens.data<std::int32_t>();
  const std::int32_t* q_pos = layout.q_positions.data<std::int32_t>();
  const std::int32_t* kv_pos = layout.kv_positions.data<std::int32_t>();
  std::vector<Piece> pieces;
  for (std::int64_t s = 0; s + 1 < layout.q_cu_seqlens.size(0); ++s) {
    const std::vector<Run> q_runs = runs_of(q_pos, q_cu[s], q_cu[s + 1]);
    const std::vector<Run> k_runs = runs_of(kv_pos, kv_cu[s], kv_cu[s + 1]);
    for (const Run& q : q_runs) {
      for (const Run& k : k_runs) pieces_of(q, k, layout.sliding_window, pieces);
    }
  }
  AttentionBlockPlan plan;
  for (const Piece& piece : pieces) {
    auto call = std::find_if(plan.calls.begin(), plan.calls.end(),
                             [&](const auto& c) { return fits(c, piece, disjoint_keys); });
    if (call == plan.calls.end()) {
      plan.calls.push_back({piece.mask, piece.left_bound, {}, 0, 0});
      call = plan.calls.end() - 1;
    }
    call->blocks.push_back(piece.block);
    call->max_q_rows = std::max(call->max_q_rows, piece.block.q_rows);
    call->max_kv_rows = std::max(call->max_kv_rows, piece.block.kv_rows);
  }
  std::vector<std::int32_t> calls_of_row(static_cast<std::size_t>(layout.q_positions.size(0)), 0);
  for (const AttentionBlockCall& call : plan.calls) {
    for (const AttentionBlock& block : call.blocks) {  // a call's query rows are disjoint
      for (std::int32_t r = block.q_row; r < block.q_row + block.q_rows; ++r) {
        plan.merges |= ++calls_of_row[r] > 1;
      }
    }
  }
  return plan;
}

bool attention_block_sees(const AttentionBlockCall& call, const AttentionBlock& block,
                          std::int32_t i, std::int32_t j) {
  const std::int32_t diagonal = i + block.kv_rows - block.q_rows;
  if (call.mask == AttentionBlockMask::causal && j > diagonal) return false;
  return call.left_bound <= 0 || diagonal - j < call.left_bound;
}

}  // namespace dyncp::ops
