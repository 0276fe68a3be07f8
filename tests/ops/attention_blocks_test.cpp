// The attention contract as blocks of contiguous positions (ops/attention_blocks.hpp), the
// form cuDNN's fused attention takes: on whole sequences, zigzag CP shards against all-gathered
// keys, single ring blocks and keys in scrambled order, with and without a sliding window,
// every visible pair is in exactly one block of one call and no invisible pair in any, every
// block row sees a key, calls keep their rows disjoint; and running each block as the library
// would (a bottom-right diagonal band, realised here through the CPU op's own positions and
// window) then merging by lse gives the op's out, lse, dq, dk and dv.

#include "ops/attention_blocks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/arena.hpp"
#include "op_test_utils.hpp"
#include "ops/attention.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

struct Case {
  std::vector<std::int32_t> q_cu{0}, kv_cu{0}, q_pos, kv_pos;
  std::int32_t window = 0;
  VarlenAttentionLayout layout() const {
    return {int_tensor(q_cu), int_tensor(kv_cu), int_tensor(q_pos), int_tensor(kv_pos), window};
  }
};

// Zigzag shard of rank `rank` in a group of c (chunks rank and 2c-1-rank of each sequence).
std::vector<std::int32_t> zigzag(std::int32_t length, int c, int rank) {
  std::vector<std::int32_t> positions;
  const std::int32_t chunk = length / (2 * c);
  for (int part : {rank, 2 * c - 1 - rank})
    for (std::int32_t p = part * chunk; p < (part + 1) * chunk; ++p) positions.push_back(p);
  return positions;
}

// kind: 0 whole sequences, 1 zigzag queries against keys all-gathered in rank order, 2 zigzag
// queries against one other rank's shard (a ring step), 3 whole queries against scrambled keys,
// 4 zigzag queries against the whole sequence in position order.
Case make_case(int kind, int c, int rank, int source, std::int32_t window) {
  const std::vector<std::int32_t> lengths{2 * c * 3, 0, 2 * c * 17, 2 * c};
  Case out;
  out.window = window;
  std::mt19937 rng(11);
  for (const std::int32_t length : lengths) {
    std::vector<std::int32_t> q, k;
    if (kind == 0 || kind == 3) {
      q.resize(length);
      std::iota(q.begin(), q.end(), 0);
      k = q;
      if (kind == 3) std::shuffle(k.begin(), k.end(), rng);
    } else {
      q = zigzag(length, c, rank);
      if (kind == 4) {
        k.resize(length);
        std::iota(k.begin(), k.end(), 0);
      } else if (kind == 1) {
        for (int r = 0; r < c; ++r) {
          const auto shard = zigzag(length, c, r);
          k.insert(k.end(), shard.begin(), shard.end());
        }
      } else {
        k = zigzag(length, c, source);
      }
    }
    out.q_pos.insert(out.q_pos.end(), q.begin(), q.end());
    out.kv_pos.insert(out.kv_pos.end(), k.begin(), k.end());
    out.q_cu.push_back(out.q_cu.back() + static_cast<std::int32_t>(q.size()));
    out.kv_cu.push_back(out.kv_cu.back() + static_cast<std::int32_t>(k.size()));
  }
  return out;
}

bool contract_sees(const Case& c, std::int32_t qi, std::int32_t kj) {
  const std::int32_t dq = c.q_pos[qi], dk = c.kv_pos[kj];
  return dk <= dq && (c.window == 0 || dq - dk < c.window);
}

std::int32_t sequence_of(const std::vector<std::int32_t>& cu, std::int32_t row) {
  return static_cast<std::int32_t>(std::upper_bound(cu.begin(), cu.end(), row) - cu.begin()) - 1;
}

void check_plan(const Case& c, const AttentionBlockPlan& plan, bool disjoint_keys) {
  const std::int32_t tq = c.q_cu.back(), tk = c.kv_cu.back();
  std::vector<int> covered(static_cast<std::size_t>(tq) * tk, 0);
  for (const AttentionBlockCall& call : plan.calls) {
    std::vector<int> q_used(tq, 0), k_used(tk, 0);
    for (const AttentionBlock& b : call.blocks) {
      REQUIRE(b.q_rows > 0);
      REQUIRE(b.kv_rows > 0);
      REQUIRE(b.q_rows <= call.max_q_rows);
      REQUIRE(b.kv_rows <= call.max_kv_rows);
      if (call.mask == AttentionBlockMask::causal) REQUIRE(b.q_rows <= b.kv_rows);
      REQUIRE(sequence_of(c.q_cu, b.q_row) == sequence_of(c.kv_cu, b.kv_row));
      for (std::int32_t i = 0; i < b.q_rows; ++i) {
        REQUIRE(++q_used[b.q_row + i] == 1);
        bool any = false;
        for (std::int32_t j = 0; j < b.kv_rows; ++j) {
          if (!attention_block_sees(call, b, i, j)) continue;
          any = true;
          ++covered[static_cast<std::size_t>(b.q_row + i) * tk + b.kv_row + j];
        }
        REQUIRE(any);
      }
      for (std::int32_t j = 0; j < b.kv_rows; ++j) {
        ++k_used[b.kv_row + j];
        if (disjoint_keys) REQUIRE(k_used[b.kv_row + j] == 1);
      }
    }
  }
  for (std::int32_t qi = 0; qi < tq; ++qi) {
    for (std::int32_t kj = 0; kj < tk; ++kj) {
      const bool same = sequence_of(c.q_cu, qi) == sequence_of(c.kv_cu, kj);
      const int expected = same && contract_sees(c, qi, kj) ? 1 : 0;
      INFO("query row " << qi << " (position " << c.q_pos[qi] << "), key row " << kj
                        << " (position " << c.kv_pos[kj] << "), window " << c.window);
      REQUIRE(covered[static_cast<std::size_t>(qi) * tk + kj] == expected);
    }
  }
}

Tensor rows_of(const Tensor& t, std::int32_t row, std::int32_t rows) {
  return t.slice(row, row + rows);
}

// One block as the library runs it: key j at position j, query i on the bottom-right diagonal
// d(i) = i + skv - sq (shifted by sq for a full block, so every key lies below it), the band's
// left bound as the op's window (shifted alike).
VarlenAttentionLayout block_layout(const AttentionBlockCall& call, const AttentionBlock& b) {
  const std::int32_t shift = call.mask == AttentionBlockMask::full ? b.q_rows : 0;
  std::vector<std::int32_t> q(b.q_rows), k(b.kv_rows);
  for (std::int32_t i = 0; i < b.q_rows; ++i) q[i] = i + b.kv_rows - b.q_rows + shift;
  std::iota(k.begin(), k.end(), 0);
  return {int_tensor({0, b.q_rows}), int_tensor({0, b.kv_rows}), int_tensor(q), int_tensor(k),
          call.left_bound > 0 ? call.left_bound + shift : 0};
}

}  // namespace

TEST_CASE("attention blocks cover every visible pair exactly once on CP layouts",
          "[ops][attention][blocks]") {
  const int kind = GENERATE(0, 1, 2, 3, 4);
  const int c = GENERATE(2, 4);
  const std::int32_t window = GENERATE(0, 1, 3, 8, 100);
  const bool disjoint_keys = GENERATE(false, true);
  for (int rank = 0; rank < c; ++rank) {
    for (int source = 0; source < (kind == 2 ? c : 1); ++source) {
      const Case layout = make_case(kind, c, rank, source, window);
      const AttentionBlockPlan plan = plan_attention_blocks(layout.layout(), disjoint_keys);
      INFO("kind " << kind << " c " << c << " rank " << rank << " source " << source);
      check_plan(layout, plan, disjoint_keys);
    }
  }
}

TEST_CASE("a zigzag shard against keys in position order is one causal block per half",
          "[ops][attention][blocks]") {
  const Case sorted = make_case(4, 4, 1, 0, 0);
  const AttentionBlockPlan forward = plan_attention_blocks(sorted.layout(), false);
  REQUIRE(forward.calls.size() == 1);
  REQUIRE(!forward.merges);
  REQUIRE(forward.calls[0].mask == AttentionBlockMask::causal);
  REQUIRE(forward.calls[0].blocks.size() == 6);  // two halves of each non-empty sequence
  // The backward's dK / dV: the two halves' key prefixes overlap, so two calls, still no merge.
  const AttentionBlockPlan backward = plan_attention_blocks(sorted.layout(), true);
  REQUIRE(backward.calls.size() == 2);
  REQUIRE(!backward.merges);
  // Keys in rank order (the all-gather's): a half sees its prefix as several key runs, the
  // runs below it full blocks, each in its own call, merged by lse.
  const AttentionBlockPlan rank_order =
      plan_attention_blocks(make_case(1, 4, 1, 0, 0).layout(), false);
  // Keys in memory: chunks 0 7 | 1 6 | 2 5 | 3 4 (ranks 0-3), so runs {0} {7} {1} {6} {2} {5}
  // {3, 4}; chunk 6 sees {0} {1} {2} {3, 4} {5} whole and {6} causally: six calls.
  REQUIRE(rank_order.calls.size() == 6);
  REQUIRE(rank_order.merges);
}

TEST_CASE("running each block and merging by lse equals the op, forward and backward",
          "[ops][attention][blocks]") {
  const int kind = GENERATE(1, 2, 3);
  const std::int32_t window = GENERATE(0, 5);
  const Case layout = make_case(kind, 2, 1, 0, window);
  const std::int64_t hq = 4, hkv = 2, d = 8;
  const std::int64_t tq = layout.q_cu.back(), tk = layout.kv_cu.back();
  const double scale = 0.3;
  const Tensor q = random_tensor(Shape{tq, hq, d}, DType::f64, 1);
  const Tensor k = random_tensor(Shape{tk, hkv, d}, DType::f64, 2);
  const Tensor v = random_tensor(Shape{tk, hkv, d}, DType::f64, 3);
  const Tensor dout = random_tensor(Shape{tq, hq, d}, DType::f64, 4);
  dyncp::core::Arena scratch("attention-blocks-test", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const Tensor out = Tensor::empty(q.shape(), DType::f64);
  AttentionSaved saved{Tensor::empty(Shape{tq, hq}, DType::f64)};
  attention_forward(ctx, q, k, v, layout.layout(), scale, out, saved);
  const Tensor dq = Tensor::empty(q.shape(), DType::f64);
  const Tensor dk = Tensor::empty(k.shape(), DType::f64), dv = Tensor::empty(v.shape(), DType::f64);
  attention_backward(ctx, dout, q, k, v, out, saved, layout.layout(), scale, dq, dk, dv);

  const AttentionBlockPlan plan = plan_attention_blocks(layout.layout(), false);
  const Tensor merged = Tensor::zeros(q.shape(), DType::f64);
  const Tensor merged_lse = Tensor::empty(Shape{tq, hq}, DType::f64);
  for (std::int64_t i = 0; i < merged_lse.numel(); ++i)
    set_element(merged_lse, i, -std::numeric_limits<double>::infinity());
  for (const AttentionBlockCall& call : plan.calls) {
    const Tensor part = Tensor::zeros(q.shape(), DType::f64);
    const Tensor part_lse = clone(merged_lse);
    for (std::int64_t i = 0; i < part_lse.numel(); ++i)
      set_element(part_lse, i, -std::numeric_limits<double>::infinity());
    for (const AttentionBlock& b : call.blocks) {
      AttentionSaved block_saved{rows_of(part_lse, b.q_row, b.q_rows)};
      attention_forward(ctx, rows_of(q, b.q_row, b.q_rows), rows_of(k, b.kv_row, b.kv_rows),
                        rows_of(v, b.kv_row, b.kv_rows), block_layout(call, b), scale,
                        rows_of(part, b.q_row, b.q_rows), block_saved);
    }
    attention_merge(ctx, merged, merged_lse, part, part_lse);
  }
  require_close(merged, out, 1e-12, 1e-12, "merged out");
  require_close(merged_lse, saved.lse, 1e-12, 1e-12, "merged lse");

  // Backward: each block with the final out and lse; dq, dk, dv contributions add.
  const AttentionBlockPlan backward = plan_attention_blocks(layout.layout(), true);
  const Tensor sum_dq = Tensor::zeros(q.shape(), DType::f64);
  const Tensor sum_dk = Tensor::zeros(k.shape(), DType::f64);
  const Tensor sum_dv = Tensor::zeros(v.shape(), DType::f64);
  for (const AttentionBlockCall& call : backward.calls) {
    for (const AttentionBlock& b : call.blocks) {
      const AttentionSaved block_saved{rows_of(saved.lse, b.q_row, b.q_rows)};
      attention_backward(ctx, rows_of(dout, b.q_row, b.q_rows), rows_of(q, b.q_row, b.q_rows),
                         rows_of(k, b.kv_row, b.kv_rows), rows_of(v, b.kv_row, b.kv_rows),
                         rows_of(out, b.q_row, b.q_rows), block_saved, block_layout(call, b), scale,
                         rows_of(sum_dq, b.q_row, b.q_rows), rows_of(sum_dk, b.kv_row, b.kv_rows),
                         rows_of(sum_dv, b.kv_row, b.kv_rows),
                         {GradMode::accumulate, GradMode::accumulate, GradMode::accumulate});
    }
  }
  require_close(sum_dq, dq, 1e-11, 1e-12, "summed dq");
  require_close(sum_dk, dk, 1e-11, 1e-12, "summed dk");
  require_close(sum_dv, dv, 1e-11, 1e-12, "summed dv");
}
