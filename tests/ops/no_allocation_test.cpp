// Ops called in steady state (views from an arena, scratch from an arena) make no heap
// allocation: the step-loop rule of STYLE.md §3.13 holds for every op in lib/ops.

#include <vector>

#include "core/alloc_counter.hpp"
#include "op_test_utils.hpp"
#include "ops/adamw.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/embedding.hpp"
#include "ops/gemm.hpp"
#include "ops/moe_aux_loss.hpp"
#include "ops/permute.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "ops/router.hpp"
#include "ops/swiglu.hpp"
#include "ops/vocab_parallel_cross_entropy.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

TEST_CASE("a warmed-up forward/backward over every op allocates nothing", "[ops][alloc]") {
  const std::int64_t tokens = 70, hidden = 16, heads = 2, kv_heads = 1, head_dim = 8, vocab = 40;
  const std::int64_t experts = 4, top_k = 2, inter = 12;
  // Inputs and parameters are set up once, outside the measured steps.
  const Tensor ids = int_tensor(std::vector<std::int32_t>(tokens, 3));
  const Tensor cu = int_tensor({0, 30, 30, 70});
  std::vector<std::int32_t> pos_values;
  for (int p = 0; p < 30; ++p) pos_values.push_back(p);
  for (int p = 0; p < 40; ++p) pos_values.push_back(p);
  const Tensor positions = int_tensor(pos_values);
  const Tensor labels = int_tensor(std::vector<std::int32_t>(tokens, 5));
  const Tensor table = random_tensor(Shape{vocab, hidden}, DType::f32, 1);
  const Tensor norm_w = random_tensor(Shape{hidden}, DType::f32, 2);
  const Tensor wq = random_tensor(Shape{heads * head_dim, hidden}, DType::f32, 3, 0.1);
  const Tensor wk = random_tensor(Shape{kv_heads * head_dim, hidden}, DType::f32, 4, 0.1);
  const Tensor router_w = random_tensor(Shape{experts, hidden}, DType::f32, 5, 0.1);
  const Tensor gate_up_w = random_tensor(Shape{experts, 2 * inter, hidden}, DType::f32, 6, 0.1);
  const Tensor down_w = random_tensor(Shape{experts, hidden, inter}, DType::f32, 7, 0.1);
  const Tensor grads = Tensor::zeros(Shape{vocab, hidden}, DType::f32);
  const Tensor moments = Tensor::zeros(Shape{2, vocab, hidden}, DType::f32);

  dyncp::core::Arena activations("activations", 1 << 16);
  dyncp::core::Arena scratch("scratch", 1 << 14);
  OpContext ctx;
  ctx.scratch = &scratch;

  auto step = [&](std::int64_t step_index) {
    activations.reset();
    auto f32 = [&](const Shape& shape) { return activations.allocate(shape, DType::f32); };
    const Tensor x = f32({tokens, hidden}), normed = f32({tokens, hidden});
    embedding_forward(ctx, ids, table, x);
    RmsNormSaved norm_saved{f32({tokens})};
    rmsnorm_forward(ctx, x, norm_w, 1e-6, RmsNormVariant::plain, normed, norm_saved);
    const Tensor q = f32({tokens, heads, head_dim}), k = f32({tokens, kv_heads, head_dim});
    linear_forward(ctx, normed, wq, q);
    linear_forward(ctx, normed, wk, k);
    rope_forward(ctx, q, positions, RopeParams{10000.0, head_dim}, q);
    const Tensor attn = f32({tokens, heads, head_dim});
    AttentionSaved attn_saved{f32({tokens, heads})};
    const VarlenAttentionLayout layout{cu, cu, positions, positions};
    attention_forward(ctx, q, k, k, layout, 0.3, attn, attn_saved);
    const Tensor dq = f32(q.shape()), dk = f32(k.shape()), dv = f32(k.shape());
    attention_backward(ctx, attn, q, k, k, attn, attn_saved, layout, 0.3, dq, dk, dv);
    rope_backward(ctx, dq, positions, RopeParams{10000.0, head_dim}, dq);

    const Tensor logits = f32({tokens, experts});
    linear_forward(ctx, normed, router_w, logits);
    const Tensor expert_ids = activations.allocate(Shape{tokens, top_k}, DType::i32);
    const Tensor weights = f32({tokens, top_k});
    RouterSaved router_saved{f32({tokens, experts})};
    router_forward(ctx, logits, top_k, true, expert_ids, weights, router_saved);
    const Tensor counts = f32({3, experts}), sums = f32({3, experts}), coeff = f32({3, experts});
    moe_aux_loss_statistics(ctx, router_saved.probs, expert_ids, cu, Tensor(), counts, sums);
    moe_aux_loss_finish(ctx, counts, sums, top_k, 0.001, 3, coeff);
    PermutePlan plan{activations.allocate(Shape{tokens * top_k}, DType::i32),
                     activations.allocate(Shape{tokens * top_k}, DType::i32),
                     activations.allocate(Shape{experts + 1}, DType::i64),
                     activations.allocate(Shape{experts}, DType::i64)};
    build_permute_plan(ctx, expert_ids, experts, plan);
    const Tensor x_perm = f32({tokens * top_k, hidden}), gu = f32({tokens * top_k, 2 * inter});
    const Tensor act = f32({tokens * top_k, inter}), y_perm = f32({tokens * top_k, hidden});
    permute_forward(ctx, normed, plan, x_perm);
    grouped_linear_forward(ctx, x_perm, gate_up_w, plan.expert_offsets, gu);
    swiglu_fused_forward(ctx, gu, act);
    grouped_linear_forward(ctx, act, down_w, plan.expert_offsets, y_perm);
    const Tensor moe_out = f32({tokens, hidden});
    unpermute_forward(ctx, y_perm, plan, weights, moe_out);

    const Tensor dhidden = f32({tokens, hidden});
    grads.fill_zero();
    fused_cross_entropy(ctx, moe_out, table, labels, Tensor(), Tensor(), dhidden, grads,
                        CrossEntropyOptions{16, 16, 1.0});
    // The vocabulary-parallel forms over two shards of the table (the TP reductions left out).
    const Tensor shard_lses = f32({2, tokens}), target = f32({tokens}), lse = f32({tokens});
    const auto rows_of = [&](const Tensor& t, std::int64_t s) {
      return t.slice(s * vocab / 2, (s + 1) * vocab / 2);
    };
    for (std::int64_t s = 0; s < 2; ++s) {
      const VocabShardRange shard{s * vocab / 2, vocab};
      embedding_shard_forward(ctx, ids, rows_of(table, s), shard, x);
      embedding_shard_backward(ctx, ids, dhidden, rows_of(grads, s), shard);
      vocab_shard_logsumexp(ctx, moe_out, rows_of(table, s), shard, labels, Tensor(),
                            shard_lses.select(s), target, CrossEntropyOptions{16, 8, 1.0});
    }
    combine_shard_logsumexp(ctx, shard_lses, lse);
    for (std::int64_t s = 0; s < 2; ++s) {
      vocab_shard_cross_entropy(ctx, moe_out, rows_of(table, s), {s * vocab / 2, vocab}, labels,
                                Tensor(), lse, target, Tensor(), dhidden, rows_of(grads, s),
                                CrossEntropyOptions{16, 8, 1.0});
    }
    AdamWParams params;
    params.step = step_index;
    adamw_step(ctx, table, grads, moments.select(0), moments.select(1), params, true);
  };

  for (std::int64_t s = 1; s <= 2; ++s) step(s);
  dyncp::core::AllocationCounter counter;
  for (std::int64_t s = 3; s <= 6; ++s) step(s);
  CHECK(counter.count() == 0);
  CHECK(scratch.bytes_in_use() == 0);
}
