// Conversion, RoPE, SwiGLU, AdamW and gradient norm kernels against lib/ops.
#include <cmath>
#include <cstring>

#include "gpu_test.hpp"
#include "ops.hpp"
#include "ops/adamw.hpp"
#include "ops/elementwise.hpp"
#include "ops/grad_norm.hpp"
#include "ops/rope.hpp"
#include "ops/swiglu.hpp"

namespace dyncp::gpu_test {
namespace {

const ops::OpContext cpu{};

GPU_TEST(convert_rounds_like_the_cpu) {
  std::vector<float> src = random_floats(1000, 1, -100.0f, 100.0f);
  src[0] = 1.0f + 1.0f / 256.0f;  // a tie: rounds to even
  std::vector<std::uint16_t> want_bits(src.size());
  ops::convert(cpu, view(src, {1000}), Tensor::view_of(want_bits.data(), {1000}, DType::bf16));
  DeviceBuffer<float> d_src(src);
  DeviceBuffer<kernels::bf16> d_dst(src.size());
  DeviceBuffer<float> d_back(src.size());
  kernels::convert_f32_to_bf16(d_src.get(), d_dst.get(), 1000, nullptr);
  kernels::convert_bf16_to_f32(d_dst.get(), d_back.get(), 1000, nullptr);
  const auto got = d_dst.download();
  bool same = true;
  for (std::size_t i = 0; i < src.size(); ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, &got[i], 2);
    same = same && bits == want_bits[i];
  }
  expect(same, "bf16 bits equal the CPU's round-to-nearest-even");
  expect_close("bf16 -> f32", d_back.download(), round_to_bf16(src), 0.0, 0.0);
}

void check_rope(int tokens, int heads, int d, int rotary_dim, bool in_place) {
  std::vector<float> x = random_floats(static_cast<std::size_t>(tokens) * heads * d, 2);
  std::vector<std::int32_t> positions(tokens);
  for (int t = 0; t < tokens; ++t) positions[t] = (t * 977) % 40000;  // large global positions
  const ops::RopeParams params{.theta = 1e6, .rotary_dim = rotary_dim};
  std::vector<float> want(x.size()), want_back(x.size());
  ops::rope_forward(cpu, view(x, {tokens, heads, d}), view(positions, {tokens}), params,
                    view(want, {tokens, heads, d}));
  ops::rope_backward(cpu, view(x, {tokens, heads, d}), view(positions, {tokens}), params,
                     view(want_back, {tokens, heads, d}));
  DeviceBuffer<float> d_x(x), d_y(x.size());
  DeviceBuffer<std::int32_t> d_pos(positions);
  float* y = in_place ? d_x.get() : d_y.get();
  kernels::rope_apply(d_x.get(), d_pos.get(), y, tokens, heads, d, rotary_dim, params.theta, false,
                      nullptr);
  const std::string name = "rope d=" + std::to_string(d) + " rot=" + std::to_string(rotary_dim) +
                           (in_place ? " in place" : "");
  expect_close(name + " forward", in_place ? d_x.download() : d_y.download(), want, kF32AtolRel,
               1e-3);
  d_x.upload(x);
  kernels::rope_apply(d_x.get(), d_pos.get(), y, tokens, heads, d, rotary_dim, params.theta, true,
                      nullptr);
  expect_close(name + " backward", in_place ? d_x.download() : d_y.download(), want_back,
               kF32AtolRel, 1e-3);
}

GPU_TEST(rope_full_and_partial) {
  check_rope(37, 3, 64, 64, false);
  check_rope(37, 3, 64, 16, false);  // partial rotary: the tail passes through
  check_rope(5, 2, 128, 32, true);
}

GPU_TEST(swiglu_plain_and_fused) {
  const int rows = 67, inner = 45;
  std::vector<float> gate = random_floats(rows * inner, 3, -4, 4);
  std::vector<float> up = random_floats(rows * inner, 4), dout = random_floats(rows * inner, 5);
  std::vector<float> out(rows * inner), dgate(rows * inner), dup(rows * inner);
  ops::swiglu_forward(cpu, view(gate, {rows, inner}), view(up, {rows, inner}),
                      view(out, {rows, inner}));
  ops::swiglu_backward(cpu, view(dout, {rows, inner}), view(gate, {rows, inner}),
                       view(up, {rows, inner}), view(dgate, {rows, inner}),
                       view(dup, {rows, inner}));
  DeviceBuffer<float> d_gate(gate), d_up(up), d_dout(dout), d_out(out.size()), d_dgate(out.size()),
      d_dup(out.size());
  kernels::swiglu_forward(d_gate.get(), d_up.get(), inner, d_out.get(), rows, inner, nullptr);
  kernels::swiglu_backward(d_dout.get(), d_gate.get(), d_up.get(), inner, d_dgate.get(),
                           d_dup.get(), inner, rows, inner, nullptr);
  expect_close("swiglu forward", d_out.download(), out, kF32AtolRel, kF32Rtol);
  expect_close("swiglu dgate", d_dgate.download(), dgate, kF32AtolRel, kF32Rtol);
  expect_close("swiglu dup", d_dup.download(), dup, kF32AtolRel, kF32Rtol);

  // Fused [rows, 2I] layout: the same kernels with row stride 2I.
  std::vector<float> gate_up(rows * 2 * inner), fused_out(rows * inner), dgate_up(rows * 2 * inner);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < inner; ++c) {
      gate_up[r * 2 * inner + c] = gate[r * inner + c];
      gate_up[r * 2 * inner + inner + c] = up[r * inner + c];
    }
  }
  ops::swiglu_fused_forward(cpu, view(gate_up, {rows, 2 * inner}), view(fused_out, {rows, inner}));
  ops::swiglu_fused_backward(cpu, view(dout, {rows, inner}), view(gate_up, {rows, 2 * inner}),
                             view(dgate_up, {rows, 2 * inner}));
  DeviceBuffer<float> d_gate_up(gate_up), d_dgate_up(gate_up.size());
  kernels::swiglu_forward(d_gate_up.get(), d_gate_up.get() + inner, 2 * inner, d_out.get(), rows,
                          inner, nullptr);
  kernels::swiglu_backward(d_dout.get(), d_gate_up.get(), d_gate_up.get() + inner, 2 * inner,
                           d_dgate_up.get(), d_dgate_up.get() + inner, 2 * inner, rows, inner,
                           nullptr);
  expect_close("swiglu fused forward", d_out.download(), fused_out, kF32AtolRel, kF32Rtol);
  expect_close("swiglu fused backward", d_dgate_up.download(), dgate_up, kF32AtolRel, kF32Rtol);
}

GPU_TEST(adamw_three_steps) {
  for (bool decay : {true, false}) {
    const int n = 1003;
    std::vector<float> p = random_floats(n, 6), m(n, 0.0f), v(n, 0.0f);
    DeviceBuffer<float> d_p(p), d_m(m), d_v(v), d_g(n);
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g = random_floats(n, 10 + step);
      const ops::AdamWParams params{
          .lr = 1e-2, .weight_decay = 0.1, .step = step, .grad_scale = 0.5};
      ops::adamw_step(cpu, view(p, {n}), view(g, {n}), view(m, {n}), view(v, {n}), params, decay);
      d_g.upload(g);
      kernels::AdamWKernelParams k{.lr = 1e-2,
                                   .weight_decay = 0.1,
                                   .step = step,
                                   .grad_scale = 0.5,
                                   .apply_weight_decay = decay};
      kernels::adamw_step(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, k, nullptr);
    }
    const std::string name = decay ? "adamw (decay)" : "adamw (no decay)";
    expect_close(name + " param", d_p.download(), p, kF32AtolRel, kF32Rtol);
    expect_close(name + " exp_avg", d_m.download(), m, kF32AtolRel, kF32Rtol);
    expect_close(name + " exp_avg_sq", d_v.download(), v, kF32AtolRel, kF32Rtol);
  }
}

GPU_TEST(grad_norm_sum_of_squares) {
  std::vector<float> a = random_floats(100003, 7), b = random_floats(17, 8, -30, 30);
  const std::vector<Tensor> grads = {view(a, {100003}), view(b, {17})};
  const double want = ops::local_grad_norm(cpu, grads);
  DeviceBuffer<float> d_a(a), d_b(b);
  DeviceBuffer<double> d_sum(1);
  d_sum.zero();
  kernels::sum_of_squares(d_a.get(), 100003, d_sum.get(), nullptr);
  kernels::sum_of_squares(d_b.get(), 17, d_sum.get(), nullptr);
  const double got = std::sqrt(d_sum.download()[0]);
  expect(std::fabs(got - want) <= 1e-9 * want,
         "grad norm " + std::to_string(got) + " vs CPU " + std::to_string(want));
}

}  // namespace
}  // namespace dyncp::gpu_test
