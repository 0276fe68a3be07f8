// The hybrid layers' kernels (sigmoid gates, head halves, DeltaNet gates, causal conv, L2 norm,
// gated RMSNorm, the gated delta rule) and the MoE aux loss against lib/ops, forward and
// backward. The element-wise kernels sum in the CPU op's order, so most compare at fp32
// round-off; the gated delta rule's kernel runs token by token against the CPU's chunked form.
#include "hybrid.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/arena.hpp"
#include "gpu_test.hpp"
#include "ops/causal_conv1d.hpp"
#include "ops/gated_delta_gates.hpp"
#include "ops/gated_delta_rule.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/head_halves.hpp"
#include "ops/l2norm.hpp"
#include "ops/moe_aux_loss.hpp"
#include "ops/segment_states.hpp"
#include "ops/sigmoid_gate.hpp"

namespace dyncp::gpu_test {
namespace {

const ops::OpContext cpu{};

GPU_TEST(sigmoid_gates_forward_backward) {
  const int rows = 37, width = 19, n = rows * width;
  std::vector<float> x = random_floats(n, 40), gate = random_floats(n, 41, -6, 6);
  std::vector<float> dout = random_floats(n, 42), row_gate = random_floats(rows, 43, -5, 5);
  std::vector<float> out(n), dx(n), dgate(n), row_out = random_floats(n, 44), row_dx(n),
                                              row_dgate(rows);
  const std::vector<float> row_start = row_out;
  ops::sigmoid_gate_forward(cpu, view(x, {rows, width}), view(gate, {rows, width}),
                            view(out, {rows, width}));
  ops::sigmoid_gate_backward(cpu, view(dout, {rows, width}), view(x, {rows, width}),
                             view(gate, {rows, width}), view(dx, {rows, width}),
                             view(dgate, {rows, width}));
  ops::sigmoid_row_gate_forward(cpu, view(x, {rows, width}), view(row_gate, {rows, 1}),
                                view(row_out, {rows, width}), ops::GradMode::accumulate);
  ops::sigmoid_row_gate_backward(cpu, view(dout, {rows, width}), view(x, {rows, width}),
                                 view(row_gate, {rows, 1}), view(row_dx, {rows, width}),
                                 view(row_dgate, {rows, 1}));
  DeviceBuffer<float> d_x(x), d_gate(gate), d_dout(dout), d_row_gate(row_gate), d_out(n), d_dx(n),
      d_dgate(n), d_row_out(row_start), d_row_dgate(rows);
  kernels::sigmoid_gate_forward(d_x.get(), d_gate.get(), d_out.get(), n, nullptr);
  kernels::sigmoid_gate_backward(d_dout.get(), d_x.get(), d_gate.get(), d_dx.get(), d_dgate.get(),
                                 n, nullptr);
  expect_close("sigmoid gate forward", d_out.download(), out, 0.0, 0.0);
  expect_close("sigmoid gate dx", d_dx.download(), dx, 0.0, 0.0);
  expect_close("sigmoid gate dgate", d_dgate.download(), dgate, 0.0, 0.0);
  kernels::sigmoid_row_gate_forward(d_x.get(), d_row_gate.get(), d_row_out.get(), rows, width, true,
                                    nullptr);
  kernels::sigmoid_row_gate_backward(d_dout.get(), d_x.get(), d_row_gate.get(), d_dx.get(),
                                     d_row_dgate.get(), rows, width, nullptr);
  expect_close("row gate forward (accumulates)", d_row_out.download(), row_out, kF32AtolRel,
               kF32Rtol);
  expect_close("row gate dx", d_dx.download(), row_dx, kF32AtolRel, kF32Rtol);
  expect_close("row gate dgate", d_row_dgate.download(), row_dgate, kF32AtolRel, kF32Rtol);
}

GPU_TEST(head_halves_split_merge) {
  const int tokens = 9, heads = 3, d = 5, n = tokens * heads * d;
  std::vector<float> packed = random_floats(2 * n, 45), first(n), second(n), merged(2 * n);
  ops::split_head_halves(cpu, view(packed, {tokens, heads, 2 * d}), view(first, {tokens, heads, d}),
                         view(second, {tokens, heads, d}));
  DeviceBuffer<float> d_packed(packed), d_first(n), d_second(n), d_merged(2 * n);
  kernels::split_head_halves(d_packed.get(), d_first.get(), d_second.get(), tokens * heads, d,
                             nullptr);
  expect_close("split first", d_first.download(), first, 0.0, 0.0);
  expect_close("split second", d_second.download(), second, 0.0, 0.0);
  kernels::merge_head_halves(d_first.get(), d_second.get(), d_merged.get(), tokens * heads, d,
                             nullptr);
  expect_close("merge inverts split", d_merged.download(), packed, 0.0, 0.0);
}

GPU_TEST(gated_delta_gates_forward_backward) {
  const int tokens = 53, heads = 4, n = tokens * heads;
  std::vector<float> a = random_floats(n, 46, -4, 4), b = random_floats(n, 47, -4, 4);
  a[3] = 25.0f;  // above softplus's threshold
  std::vector<float> A_log = random_floats(heads, 48), dt_bias = random_floats(heads, 49);
  std::vector<float> dg = random_floats(n, 50), dbeta = random_floats(n, 51);
  std::vector<float> g(n), beta(n), da(n), db(n), dA_log = random_floats(heads, 52),
                                                  ddt_bias = random_floats(heads, 53);
  const std::vector<float> dA_start = dA_log, ddt_start = ddt_bias;
  ops::gated_delta_gates_forward(cpu, view(a, {tokens, heads}), view(b, {tokens, heads}),
                                 view(A_log, {heads}), view(dt_bias, {heads}),
                                 view(g, {tokens, heads}), view(beta, {tokens, heads}));
  ops::gated_delta_gates_backward(cpu, view(dg, {tokens, heads}), view(dbeta, {tokens, heads}),
                                  view(a, {tokens, heads}), view(b, {tokens, heads}),
                                  view(A_log, {heads}), view(dt_bias, {heads}),
                                  view(da, {tokens, heads}), view(db, {tokens, heads}),
                                  view(dA_log, {heads}), view(ddt_bias, {heads}));
  DeviceBuffer<float> d_a(a), d_b(b), d_A(A_log), d_dt(dt_bias), d_dg(dg), d_dbeta(dbeta), d_g(n),
      d_beta(n), d_da(n), d_db(n), d_dA(dA_start), d_ddt(ddt_start);
  kernels::gated_delta_gates_forward(d_a.get(), d_b.get(), d_A.get(), d_dt.get(), d_g.get(),
                                     d_beta.get(), tokens, heads, nullptr);
  kernels::gated_delta_gates_backward(d_dg.get(), d_dbeta.get(), d_a.get(), d_b.get(), d_A.get(),
                                      d_dt.get(), d_da.get(), d_db.get(), d_dA.get(), d_ddt.get(),
                                      tokens, heads, nullptr);
  expect_close("gates g", d_g.download(), g, kF32AtolRel, kF32Rtol);
  expect_close("gates beta", d_beta.download(), beta, kF32AtolRel, kF32Rtol);
  expect_close("gates da", d_da.download(), da, kF32AtolRel, kF32Rtol);
  expect_close("gates db", d_db.download(), db, kF32AtolRel, kF32Rtol);
  expect_close("gates dA_log (accumulates)", d_dA.download(), dA_log, kF32AtolRel, kF32Rtol);
  expect_close("gates ddt_bias (accumulates)", d_ddt.download(), ddt_bias, kF32AtolRel, kF32Rtol);
}

GPU_TEST(moe_aux_loss_statistics_finish_backward) {
  const int experts = 8, top_k = 2;
  std::vector<std::int32_t> cu{0, 7, 7, 20, 26};  // an empty sequence, padding in the third
  const int tokens = cu.back(), sequences = static_cast<int>(cu.size()) - 1;
  std::vector<float> probs = random_floats(tokens * experts, 54, 0.01f, 1.0f);
  std::vector<std::int32_t> ids(tokens * top_k);
  for (int i = 0; i < tokens * top_k; ++i) ids[i] = (i * 5 + i / 3) % experts;
  std::vector<std::uint8_t> real(tokens, 1);
  real[18] = real[19] = 0;
  std::vector<float> counts(sequences * experts), sums(sequences * experts),
      coeff(sequences * experts), dlogits = random_floats(tokens * experts, 55);
  const std::vector<float> dlogits_start = dlogits;
  const Shape se{sequences, experts};
  ops::moe_aux_loss_statistics(cpu, view(probs, {tokens, experts}), view(ids, {tokens, top_k}),
                               view(cu, {sequences + 1}), view(real, {tokens}), view(counts, se),
                               view(sums, se));
  const double want_loss = ops::moe_aux_loss_finish(cpu, view(counts, se), view(sums, se), top_k,
                                                    0.01, 6, view(coeff, se));
  ops::moe_aux_loss_backward(cpu, view(probs, {tokens, experts}), view(cu, {sequences + 1}),
                             view(real, {tokens}), view(coeff, se),
                             view(dlogits, {tokens, experts}), 0.5);
  DeviceBuffer<float> d_probs(probs), d_counts(counts.size()), d_sums(sums.size()),
      d_coeff(coeff.size()), d_dlogits(dlogits_start);
  DeviceBuffer<std::int32_t> d_ids(ids), d_cu(cu), d_bad(std::vector<std::int32_t>{INT_MAX});
  DeviceBuffer<std::uint8_t> d_real(real);
  DeviceBuffer<double> d_losses(sequences + 1);
  kernels::moe_aux_loss_statistics(d_probs.get(), d_ids.get(), d_cu.get(), d_real.get(),
                                   d_counts.get(), d_sums.get(), sequences, experts, top_k,
                                   d_bad.get(), nullptr);
  kernels::moe_aux_loss_finish(d_counts.get(), d_sums.get(), sequences, experts, top_k, 0.01 / 6,
                               d_coeff.get(), d_losses.get(), d_losses.get() + sequences, nullptr);
  kernels::moe_aux_loss_backward(d_probs.get(), d_cu.get(), d_real.get(), d_coeff.get(),
                                 d_dlogits.get(), sequences, experts, 0.5f, nullptr);
  expect_close("aux counts", d_counts.download(), counts, 0.0, 0.0);
  expect_close("aux probability sums", d_sums.download(), sums, kF32AtolRel, kF32Rtol);
  expect_close("aux grad coefficients", d_coeff.download(), coeff, kF32AtolRel, kF32Rtol);
  const double got_loss = d_losses.download()[static_cast<std::size_t>(sequences)];
  expect(std::abs(got_loss - want_loss) <= 1e-12 * std::abs(want_loss) && want_loss > 0,
         "aux loss " + std::to_string(got_loss) + " vs " + std::to_string(want_loss));
  expect_close("aux dlogits (accumulates)", d_dlogits.download(), dlogits, kF32AtolRel, kF32Rtol);
  expect(d_bad.download()[0] == INT_MAX, "no bad expert id reported for valid ids");
  ids[2 * top_k + 1] = experts;  // token 2
  d_ids.upload(ids);
  kernels::moe_aux_loss_statistics(d_probs.get(), d_ids.get(), d_cu.get(), d_real.get(),
                                   d_counts.get(), d_sums.get(), sequences, experts, top_k,
                                   d_bad.get(), nullptr);
  expect(d_bad.download()[0] == 2, "the token with an out-of-range expert id is reported");
}

GPU_TEST(causal_conv1d_silu_forward_backward) {
  const int channels = 11, kernel = 4;
  std::vector<std::int32_t> cu{0, 2, 2, 15, 40};  // one sequence shorter than the window
  const int tokens = cu.back(), sequences = static_cast<int>(cu.size()) - 1, n = tokens * channels;
  std::vector<float> x = random_floats(n, 56, -2, 2), w = random_floats(channels * kernel, 57);
  std::vector<float> dy = random_floats(n, 58), y(n), dx(n),
                     dw = random_floats(channels * kernel, 59);
  const std::vector<float> dw_start = dw;
  const Shape tc{tokens, channels}, ck{channels, kernel};
  ops::causal_conv1d_silu_forward(cpu, view(x, tc), view(w, ck), view(cu, {sequences + 1}),
                                  view(y, tc));
  ops::causal_conv1d_silu_backward(cpu, view(dy, tc), view(x, tc), view(w, ck),
                                   view(cu, {sequences + 1}), view(dx, tc), view(dw, ck));
  DeviceBuffer<float> d_x(x), d_w(w), d_dy(dy), d_y(n), d_dx(n), d_dw(dw_start), d_dpre(n);
  DeviceBuffer<std::int32_t> d_cu(cu);
  kernels::causal_conv1d_silu_forward(d_x.get(), d_w.get(), d_cu.get(), d_y.get(), sequences,
                                      tokens, channels, kernel, nullptr);
  kernels::causal_conv1d_silu_backward(d_dy.get(), d_x.get(), d_w.get(), d_cu.get(), d_dx.get(),
                                       d_dw.get(), d_dpre.get(), sequences, tokens, channels,
                                       kernel, nullptr);
  expect_close("conv forward", d_y.download(), y, kF32AtolRel, kF32Rtol);
  expect_close("conv dx", d_dx.download(), dx, kF32AtolRel, kF32Rtol);
  expect_close("conv dweight (accumulates)", d_dw.download(), dw, kF32AtolRel, kF32Rtol);
}

GPU_TEST(l2norm_and_gated_rmsnorm_forward_backward) {
  const int rows = 29, n = 21;
  std::vector<float> x = random_floats(rows * n, 60, -2, 2), z = random_floats(rows * n, 61, -3, 3);
  std::vector<float> w = random_floats(n, 62), dy = random_floats(rows * n, 63);
  std::vector<float> y(rows * n), inv(rows), dx(rows * n);
  const Shape rn{rows, n};
  ops::L2NormSaved l2{view(inv, {rows})};
  ops::l2norm_forward(cpu, view(x, rn), 1e-6, view(y, rn), l2);
  ops::l2norm_backward(cpu, view(dy, rn), view(y, rn), l2, view(dx, rn));
  DeviceBuffer<float> d_x(x), d_z(z), d_w(w), d_dy(dy), d_y(rows * n), d_inv(rows), d_dx(rows * n);
  kernels::l2norm_forward(d_x.get(), 1e-6f, d_y.get(), d_inv.get(), rows, n, nullptr);
  kernels::l2norm_backward(d_dy.get(), d_y.get(), d_inv.get(), d_dx.get(), rows, n, nullptr);
  expect_close("l2norm forward", d_y.download(), y, kF32AtolRel, kF32Rtol);
  expect_close("l2norm inv_norm", d_inv.download(), inv, kF32AtolRel, kF32Rtol);
  expect_close("l2norm backward", d_dx.download(), dx, kF32AtolRel, kF32Rtol);

  std::vector<float> gy(rows * n), ginv(rows), gdx(rows * n), gdz(rows * n),
      gdw = random_floats(n, 64);
  const std::vector<float> gdw_start = gdw;
  ops::RmsNormSaved saved{view(ginv, {rows})};
  ops::gated_rmsnorm_forward(cpu, view(x, rn), view(z, rn), view(w, {n}), 1e-6, view(gy, rn),
                             saved);
  ops::gated_rmsnorm_backward(cpu, view(dy, rn), view(x, rn), view(z, rn), view(w, {n}), saved,
                              view(gdx, rn), view(gdz, rn), view(gdw, {n}));
  DeviceBuffer<float> d_gdz(rows * n), d_gdw(gdw_start);
  kernels::gated_rmsnorm_forward(d_x.get(), d_z.get(), d_w.get(), 1e-6f, d_y.get(), d_inv.get(),
                                 rows, n, nullptr);
  expect_close("gated rmsnorm forward", d_y.download(), gy, kF32AtolRel, kF32Rtol);
  // dx in place over dy, as the op allows
  kernels::gated_rmsnorm_backward(d_dy.get(), d_x.get(), d_z.get(), d_w.get(), d_inv.get(),
                                  d_dy.get(), d_gdz.get(), d_gdw.get(), rows, n, nullptr);
  expect_close("gated rmsnorm dx (in place)", d_dy.download(), gdx, kF32AtolRel, kF32Rtol);
  expect_close("gated rmsnorm dz", d_gdz.download(), gdz, kF32AtolRel, kF32Rtol);
  expect_close("gated rmsnorm dweight (accumulates)", d_gdw.download(), gdw, kF32AtolRel, kF32Rtol);

  // x (the rule output) and z as bf16 storage (bf16 activations): kernels and CPU op read the
  // same rounded values widened.
  std::vector<std::uint16_t> x_bits(x.size()), z_bits(z.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x_bits[i] = core::float_to_bf16_bits(x[i]);
    z_bits[i] = core::float_to_bf16_bits(z[i]);
  }
  const Tensor x16 = Tensor::view_of(x_bits.data(), rn, DType::bf16);
  const Tensor z16 = Tensor::view_of(z_bits.data(), rn, DType::bf16);
  std::vector<float> hy(rows * n), hinv(rows), hdx(rows * n), hdz(rows * n), hdw = gdw_start;
  ops::RmsNormSaved saved16{view(hinv, {rows})};
  ops::gated_rmsnorm_forward(cpu, x16, z16, view(w, {n}), 1e-6, view(hy, rn), saved16);
  ops::gated_rmsnorm_backward(cpu, view(dy, rn), x16, z16, view(w, {n}), saved16, view(hdx, rn),
                              view(hdz, rn), view(hdw, {n}));
  const DeviceBuffer<kernels::bf16> d_x16 = to_device_bf16(x), d_z16 = to_device_bf16(z);
  DeviceBuffer<float> d_hdy(dy), d_hdx(rows * n), d_hdz(rows * n), d_hdw(gdw_start);
  kernels::gated_rmsnorm_forward(d_x16.get(), d_z16.get(), d_w.get(), 1e-6f, d_y.get(), d_inv.get(),
                                 rows, n, nullptr);
  kernels::gated_rmsnorm_backward(d_hdy.get(), d_x16.get(), d_z16.get(), d_w.get(), d_inv.get(),
                                  d_hdx.get(), d_hdz.get(), d_hdw.get(), rows, n, nullptr);
  expect_close("gated rmsnorm forward, bf16 x and z", d_y.download(), hy, kF32AtolRel, kF32Rtol);
  expect_close("gated rmsnorm inv_rms, bf16 x", d_inv.download(), hinv, kF32AtolRel, kF32Rtol);
  expect_close("gated rmsnorm dx, bf16 x and z", d_hdx.download(), hdx, kF32AtolRel, kF32Rtol);
  expect_close("gated rmsnorm dz, bf16 x and z", d_hdz.download(), hdz, kF32AtolRel, kF32Rtol);
  expect_close("gated rmsnorm dweight, bf16 x and z", d_hdw.download(), hdw, kF32AtolRel, kF32Rtol);
  double largest = 0;
  for (std::size_t i = 0; i < hy.size(); ++i)
    largest = std::max(largest, std::abs(double(hy[i]) - double(gy[i])));
  expect(largest > 0, "bf16 x and z change the output (the rounding is real)");
}

// Rows of unit length (the model L2-normalises q and k before the rule).
std::vector<float> unit_rows(std::size_t rows, std::size_t n, std::uint64_t seed) {
  std::vector<float> values = random_floats(rows * n, seed);
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) sum += double(values[r * n + j]) * values[r * n + j];
    for (std::size_t j = 0; j < n; ++j) values[r * n + j] /= static_cast<float>(std::sqrt(sum));
  }
  return values;
}

GPU_TEST(gated_delta_rule_matches_the_chunked_cpu_op) {
  const int hk = 2, hv = 4, dk = 16, dv = 12, chunk = 8;
  std::vector<std::int32_t> cu{0, 21, 21, 29, 34};  // an empty sequence; chunks of 8 and a tail
  const int tokens = cu.back(), sequences = static_cast<int>(cu.size()) - 1;
  std::vector<float> q = unit_rows(tokens * hk, dk, 65), k = unit_rows(tokens * hk, dk, 66);
  std::vector<float> v = random_floats(tokens * hv * dv, 67);
  std::vector<float> g = random_floats(tokens * hv, 68, -1.5f, -0.01f);
  std::vector<float> beta = random_floats(tokens * hv, 69, 0.05f, 0.95f);
  std::vector<float> init = random_floats(sequences * hv * dk * dv, 70, -0.5f, 0.5f);
  std::vector<float> dout = random_floats(tokens * hv * dv, 71);
  std::vector<float> d_final = random_floats(sequences * hv * dk * dv, 72, -0.5f, 0.5f);
  std::vector<std::int32_t> first_chunk(sequences);
  int chunks = 0;
  for (int s = 0; s < sequences; ++s) {
    first_chunk[s] = chunks;
    chunks += (cu[s + 1] - cu[s] + chunk - 1) / chunk;
  }
  const Shape qk{tokens, hk, dk}, vs{tokens, hv, dv}, gs{tokens, hv}, ss{sequences, hv, dk, dv};
  std::vector<float> out(tokens * hv * dv), final_state(init.size()),
      states(static_cast<std::size_t>(chunks) * hv * dk * dv);
  std::vector<float> dq(q.size()), dkv(k.size()), dvv(v.size()), dg(g.size()), dbeta(beta.size()),
      d_init(init.size());
  core::Arena arena("gdr test");
  ops::OpContext ctx;
  ctx.scratch = &arena;
  const ops::GatedDeltaRuleInputs in{view(q, qk),   view(k, qk),    view(v, vs),
                                     view(g, gs),   view(beta, gs), view(cu, {sequences + 1}),
                                     view(init, ss)};
  const ops::GatedDeltaRuleParams params{.scale = 1.0 / std::sqrt(double(dk)), .chunk_size = chunk};
  ops::GatedDeltaRuleSaved saved{view(states, {chunks, hv, dk, dv})};
  ops::gated_delta_rule_chunked_forward(ctx, in, params, view(out, vs), view(final_state, ss),
                                        saved);
  ops::gated_delta_rule_chunked_backward(ctx, view(dout, vs), view(d_final, ss), in, params, saved,
                                         {view(dq, qk), view(dkv, qk), view(dvv, vs), view(dg, gs),
                                          view(dbeta, gs), view(d_init, ss)});

  DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_g(g), d_beta(beta), d_init_state(init),
      d_out(out.size()), d_final_state(init.size()), d_states(states.size()), d_dout(dout),
      d_dfinal(d_final), d_dq(q.size()), d_dk(k.size()), d_dv(v.size()), d_dg(g.size()),
      d_dbeta(beta.size()), d_dinit(init.size());
  DeviceBuffer<std::int32_t> d_cu(cu), d_first(first_chunk);
  kernels::GatedDeltaRuleArgs args;
  args.q = d_q.get();
  args.k = d_k.get();
  args.v = d_v.get();
  args.g = d_g.get();
  args.beta = d_beta.get();
  args.cu_seqlens = d_cu.get();
  args.first_chunk = d_first.get();
  args.initial_state = d_init_state.get();
  args.sequences = sequences;
  args.key_heads = hk;
  args.value_heads = hv;
  args.key_dim = dk;
  args.value_dim = dv;
  args.chunk = chunk;
  args.scale = static_cast<float>(params.scale);
  kernels::gated_delta_rule_forward(args, d_out.get(), d_final_state.get(), d_states.get(),
                                    nullptr);
  expect_close("rule out", d_out.download(), out, kF32AtolRel, kF32Rtol);
  expect_close("rule final state", d_final_state.download(), final_state, kF32AtolRel, kF32Rtol);
  expect_close("rule chunk states", d_states.download(), states, kF32AtolRel, kF32Rtol);
  DeviceBuffer<float> d_scratch(
      static_cast<std::size_t>(kernels::gated_delta_rule_backward_scratch(args, tokens)));
  kernels::gated_delta_rule_backward(args, tokens, d_states.get(), d_dout.get(), d_dfinal.get(),
                                     d_dq.get(), d_dk.get(), d_dv.get(), d_dg.get(), d_dbeta.get(),
                                     d_dinit.get(), d_scratch.get(), nullptr);
  expect_close("rule dq", d_dq.download(), dq, kF32AtolRel, kF32Rtol);
  expect_close("rule dk", d_dk.download(), dkv, kF32AtolRel, kF32Rtol);
  expect_close("rule dv", d_dv.download(), dvv, kF32AtolRel, kF32Rtol);
  expect_close("rule dg", d_dg.download(), dg, kF32AtolRel, kF32Rtol);
  expect_close("rule dbeta", d_dbeta.download(), dbeta, kF32AtolRel, kF32Rtol);
  expect_close("rule d_initial_state", d_dinit.download(), d_init, kF32AtolRel, kF32Rtol);
}

// DeltaNet state passing's algebra on walks over five segments, segments 1 and 2 this rank's.
GPU_TEST(segment_states_compose_and_state_grads) {
  const int segments = 5, heads = 2, dk = 6, dv = 5, width = dv + dk, first_own = 1, end_own = 3;
  const int own = end_own - first_own;
  std::vector<float> transitions = random_floats(segments * heads * dk * width, 73, -0.7f, 0.7f);
  std::vector<float> state_grads = random_floats(segments * heads * dk * dv, 74);
  // prefix walks 0 -> 1 -> 2 and an empty one; a suffix walk 4 -> 2 -> 1
  std::vector<std::int32_t> prefix_segments{0, 1, 2}, prefix_offsets{0, 3, 3};
  std::vector<std::int32_t> suffix_segments{4, 2, 1}, suffix_offsets{0, 3};
  const Shape ts{segments, heads, dk, width}, os{own, heads, dk, dv};
  std::vector<float> initial(own * heads * dk * dv), finals(initial.size());
  ops::compose_segment_prefixes(cpu, view(transitions, ts), view(prefix_segments, {3}),
                                view(prefix_offsets, {3}), first_own, end_own, view(initial, os));
  ops::compose_segment_suffixes(
      cpu, view(transitions, ts), view(state_grads, {segments, heads, dk, dv}),
      view(suffix_segments, {3}), view(suffix_offsets, {2}), first_own, end_own, view(finals, os));
  DeviceBuffer<float> d_transitions(transitions), d_state_grads(state_grads),
      d_initial(initial.size()), d_finals(finals.size());
  DeviceBuffer<std::int32_t> d_prefix(prefix_segments), d_prefix_offsets(prefix_offsets),
      d_suffix(suffix_segments), d_suffix_offsets(suffix_offsets);
  kernels::SegmentWalks walks;
  walks.segments = d_prefix.get();
  walks.offsets = d_prefix_offsets.get();
  walks.count = 2;
  walks.first_own = first_own;
  walks.end_own = end_own;
  walks.heads = heads;
  walks.key_dim = dk;
  walks.value_dim = dv;
  DeviceBuffer<double> d_work(static_cast<std::size_t>(kernels::segment_walk_scratch(walks)));
  kernels::compose_segment_prefixes(walks, d_transitions.get(), d_initial.get(), d_work.get(),
                                    nullptr);
  expect_close("incoming states", d_initial.download(), initial, kF32AtolRel, kF32Rtol);
  walks.segments = d_suffix.get();
  walks.offsets = d_suffix_offsets.get();
  walks.count = 1;
  kernels::compose_segment_suffixes(walks, d_transitions.get(), d_state_grads.get(), d_finals.get(),
                                    d_work.get(), nullptr);
  expect_close("final-state gradients", d_finals.download(), finals, kF32AtolRel, kF32Rtol);

  std::vector<std::int32_t> cu{0, 4, 9};
  const int tokens = cu.back();
  std::vector<float> maps = random_floats(tokens * heads * dk, 75),
                     dout = random_floats(tokens * heads * dv, 76), grads(2 * heads * dk * dv);
  ops::segment_state_grads(cpu, view(maps, {tokens, heads, dk}), view(dout, {tokens, heads, dv}),
                           view(cu, {3}), view(grads, {2, heads, dk, dv}));
  DeviceBuffer<float> d_maps(maps), d_dout(dout), d_grads(grads.size());
  DeviceBuffer<std::int32_t> d_cu(cu);
  kernels::segment_state_grads(d_maps.get(), d_dout.get(), d_cu.get(), d_grads.get(), 2, heads, dk,
                               dv, nullptr);
  expect_close("segment state gradients", d_grads.download(), grads, kF32AtolRel, kF32Rtol);

  // the seam's layout moves: a column block, and an identity block
  std::vector<float> wide = random_floats(7 * width, 77), narrow(7 * dk);
  ops::copy_columns(cpu, view(wide, {7, width}), dv, view(narrow, {7, dk}), 0, dk);
  DeviceBuffer<float> d_wide(wide), d_narrow(narrow.size());
  kernels::copy_columns(d_wide.get() + dv, width, d_narrow.get(), dk, 7, dk, nullptr);
  expect_close("copy columns", d_narrow.download(), narrow, 0.0, 0.0);
  std::vector<float> block = random_floats(3 * dk * width, 78);
  DeviceBuffer<float> d_block(block);
  ops::set_identity_columns(cpu, view(block, {3, dk, width}), dv);
  kernels::set_identity_columns(d_block.get(), 3, dk, width, dv, nullptr);
  expect_close("identity columns", d_block.download(), block, 0.0, 0.0);
}

}  // namespace
}  // namespace dyncp::gpu_test
