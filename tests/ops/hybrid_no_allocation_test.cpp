// The hybrid-layer ops (gated norm, L2 norm, gates, conv, gated delta rule in both forms) make no
// heap allocation once their arenas are warm (STYLE.md §3.13).

#include <vector>

#include "core/alloc_counter.hpp"
#include "op_test_utils.hpp"
#include "ops/causal_conv1d.hpp"
#include "ops/gated_delta_gates.hpp"
#include "ops/gated_delta_rule.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/head_halves.hpp"
#include "ops/l2norm.hpp"
#include "ops/sigmoid_gate.hpp"

namespace dyncp::ops::test {

TEST_CASE("a warmed-up hybrid-layer forward/backward allocates nothing", "[ops][alloc][gdn]") {
  const std::int64_t tokens = 45, key_heads = 1, value_heads = 2, key_dim = 8, value_dim = 4;
  const std::int64_t key_size = key_heads * key_dim,
                     conv_dim = 2 * key_size + value_heads * value_dim;
  const Tensor cu = int_tensor({0, 20, 20, 45});
  const Tensor mixed = random_tensor(Shape{tokens, conv_dim}, DType::f32, 1);
  const Tensor conv_w = random_tensor(Shape{conv_dim, 4}, DType::f32, 2, 0.5);
  const Tensor a = random_tensor(Shape{tokens, value_heads}, DType::f32, 3);
  const Tensor b = random_tensor(Shape{tokens, value_heads}, DType::f32, 4);
  const Tensor a_log = random_tensor(Shape{value_heads}, DType::f32, 5, 0.3);
  const Tensor dt_bias = random_tensor(Shape{value_heads}, DType::f32, 6);
  const Tensor z = random_tensor(Shape{tokens, value_heads, value_dim}, DType::f32, 7);
  const Tensor norm_w = random_tensor(Shape{value_dim}, DType::f32, 8);
  const Tensor dy = random_tensor(Shape{tokens, value_heads, value_dim}, DType::f32, 9);
  const Tensor q_source = random_tensor(Shape{tokens, key_heads, key_dim}, DType::f32, 10);
  const Tensor v_source = random_tensor(Shape{tokens, value_heads, value_dim}, DType::f32, 11);
  const Tensor packed = random_tensor(Shape{tokens, value_heads, 2 * value_dim}, DType::f32, 12);
  const Tensor d_conv_w = Tensor::zeros(conv_w.shape(), DType::f32);
  const Tensor d_norm_w = Tensor::zeros(norm_w.shape(), DType::f32);
  const Tensor d_a_log = Tensor::zeros(a_log.shape(), DType::f32);
  const Tensor d_dt_bias = Tensor::zeros(dt_bias.shape(), DType::f32);

  core::Arena activations("activations", 1 << 16);
  core::Arena scratch("scratch", 1 << 14);
  const OpContext ctx{core::Device::cpu, &scratch};
  const GatedDeltaRuleParams params{0.35, 16};
  const std::int64_t chunks = gated_delta_rule_num_chunks(cu, params.chunk_size);

  auto step = [&] {
    activations.reset();
    auto f32 = [&](const Shape& shape) { return activations.allocate(shape, DType::f32); };
    const Tensor conv_out = f32({tokens, conv_dim});
    causal_conv1d_silu_forward(ctx, mixed, conv_w, cu, conv_out);
    const Tensor q = f32({tokens, key_heads, key_dim}), v = f32({tokens, value_heads, value_dim});
    q.copy_from(q_source);
    v.copy_from(v_source);
    L2NormSaved q_saved{f32({tokens * key_heads})};
    l2norm_forward(ctx, q, 1e-6, q, q_saved);
    const Tensor gate_a = f32({tokens, value_heads, value_dim});
    const Tensor gate_b = f32({tokens, value_heads, value_dim});
    split_head_halves(ctx, packed, gate_a, gate_b);
    merge_head_halves(ctx, gate_a, gate_b, f32(packed.shape()));
    const Tensor g = f32({tokens, value_heads}), beta = f32({tokens, value_heads});
    gated_delta_gates_forward(ctx, a, b, a_log, dt_bias, g, beta);
    GatedDeltaRuleInputs in{q, q, v, g, beta, cu, Tensor()};
    const Tensor core = f32({tokens, value_heads, value_dim});
    GatedDeltaRuleSaved saved{f32({chunks, value_heads, key_dim, value_dim})};
    gated_delta_rule_chunked_forward(ctx, in, params, core, Tensor(), saved);
    const Tensor y = f32({tokens, value_heads, value_dim});
    RmsNormSaved norm_saved{f32({tokens * value_heads})};
    gated_rmsnorm_forward(ctx, core, z, norm_w, 1e-6, y, norm_saved);
    sigmoid_gate_forward(ctx, y, gate_b, y);
    sigmoid_row_gate_forward(ctx, y, g.slice(0, tokens).reshape(Shape{tokens * value_heads}), y);

    const Tensor dcore = f32(core.shape()), dz = f32(z.shape()), dy2 = f32(y.shape());
    sigmoid_gate_backward(ctx, dy, y, gate_b, dy2, Tensor());
    sigmoid_row_gate_backward(ctx, dy, y, g.reshape(Shape{tokens * value_heads}), Tensor(),
                              f32({tokens * value_heads}));
    gated_rmsnorm_backward(ctx, dy2, core, z, norm_w, norm_saved, dcore, dz, d_norm_w);
    GatedDeltaRuleGrads grads{f32(q.shape()), f32(q.shape()),    f32(v.shape()),
                              f32(g.shape()), f32(beta.shape()), Tensor()};
    gated_delta_rule_chunked_backward(ctx, dcore, Tensor(), in, params, saved, grads);
    gated_delta_rule_chunked_backward(ctx, dcore, Tensor(), in, params, GatedDeltaRuleSaved{},
                                      grads);
    gated_delta_rule_recurrent_forward(ctx, in, params, core, Tensor());
    gated_delta_rule_recurrent_backward(ctx, dcore, Tensor(), in, params, grads);
    const Tensor dq = f32(q.shape());
    l2norm_backward(ctx, grads.dq, q, q_saved, dq);
    gated_delta_gates_backward(ctx, grads.dg, grads.dbeta, a, b, a_log, dt_bias, f32(a.shape()),
                               f32(b.shape()), d_a_log, d_dt_bias);
    const Tensor dmixed = f32(mixed.shape());
    causal_conv1d_silu_backward(ctx, conv_out, mixed, conv_w, cu, dmixed, d_conv_w);
  };
  step();
  step();
  core::AllocationCounter counter;
  for (int i = 0; i < 3; ++i) step();
  CHECK(counter.count() == 0);
}

}  // namespace dyncp::ops::test
