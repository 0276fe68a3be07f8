// Conversion, RoPE, SwiGLU, AdamW and gradient norm kernels against lib/ops.
#include <algorithm>
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

// The table cuda_ops passes to the kernel.
kernels::RopeTable table_of(const ops::RopeParams& params) {
  const ops::RopeFrequencies frequencies = ops::rope_frequencies(params);
  kernels::RopeTable table{};
  for (int i = 0; i < frequencies.count; ++i)
    table.inv_freq[i] = static_cast<float>(frequencies.inv_freq[i]);
  table.attention_factor = static_cast<float>(frequencies.attention_factor);
  return table;
}

void check_rope(int tokens, int heads, int d, int rotary_dim, bool in_place,
                ops::RopeScaling scaling = {}, int frequency_dim = 0) {
  std::vector<float> x = random_floats(static_cast<std::size_t>(tokens) * heads * d, 2);
  std::vector<std::int32_t> positions(tokens);
  for (int t = 0; t < tokens; ++t) positions[t] = (t * 977) % 40000;  // large global positions
  const ops::RopeParams params{
      .theta = 1e6, .rotary_dim = rotary_dim, .frequency_dim = frequency_dim, .scaling = scaling};
  const kernels::RopeTable table = table_of(params);
  std::vector<float> want(x.size()), want_back(x.size());
  ops::rope_forward(cpu, view(x, {tokens, heads, d}), view(positions, {tokens}), params,
                    view(want, {tokens, heads, d}));
  ops::rope_backward(cpu, view(x, {tokens, heads, d}), view(positions, {tokens}), params,
                     view(want_back, {tokens, heads, d}));
  DeviceBuffer<float> d_x(x), d_y(x.size());
  DeviceBuffer<std::int32_t> d_pos(positions);
  float* y = in_place ? d_x.get() : d_y.get();
  kernels::rope_apply(d_x.get(), d_pos.get(), y, tokens, heads, d, rotary_dim, table, false,
                      nullptr);
  const std::string name = "rope d=" + std::to_string(d) + " rot=" + std::to_string(rotary_dim) +
                           (in_place ? " in place" : "");
  expect_close(name + " forward", in_place ? d_x.download() : d_y.download(), want, kF32AtolRel,
               1e-3);
  d_x.upload(x);
  kernels::rope_apply(d_x.get(), d_pos.get(), y, tokens, heads, d, rotary_dim, table, true,
                      nullptr);
  expect_close(name + " backward", in_place ? d_x.download() : d_y.download(), want_back,
               kF32AtolRel, 1e-3);
}

GPU_TEST(rope_full_and_partial) {
  check_rope(37, 3, 64, 64, false);
  check_rope(37, 3, 64, 16, false);  // partial rotary: the tail passes through
  check_rope(5, 2, 128, 32, true);
}

GPU_TEST(rope_scaling_types_and_odd_frequency_dim) {
  ops::RopeScaling yarn{
      .type = ops::RopeScalingType::yarn, .factor = 4.0, .original_max_position_embeddings = 4096};
  check_rope(37, 3, 64, 64, false, yarn);  // attention factor 0.1 ln 4 + 1 on cos and sin
  ops::RopeScaling llama3{.type = ops::RopeScalingType::llama3,
                          .factor = 8.0,
                          .original_max_position_embeddings = 8192};
  check_rope(37, 3, 64, 32, true, llama3);
  ops::RopeScaling linear{.type = ops::RopeScalingType::linear, .factor = 2.0};
  check_rope(11, 2, 12, 4, false, linear, 3);  // HF's odd rotary dim 3: 4 rotated dims
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

  // gate_up as bf16 storage (bf16 activations): the kernels and the CPU op read the same
  // rounded values widened, so they agree as on fp32 inputs.
  std::vector<std::uint16_t> gate_up_bits(gate_up.size());
  for (std::size_t i = 0; i < gate_up.size(); ++i)
    gate_up_bits[i] = core::float_to_bf16_bits(gate_up[i]);
  const Tensor bf16_gate_up = Tensor::view_of(gate_up_bits.data(), {rows, 2 * inner}, DType::bf16);
  std::vector<float> out16(rows * inner), dgate_up16(rows * 2 * inner);
  ops::swiglu_fused_forward(cpu, bf16_gate_up, view(out16, {rows, inner}));
  ops::swiglu_fused_backward(cpu, view(dout, {rows, inner}), bf16_gate_up,
                             view(dgate_up16, {rows, 2 * inner}));
  const DeviceBuffer<kernels::bf16> d_gate_up16 = to_device_bf16(gate_up);
  const kernels::bf16* base16 = d_gate_up16.get();
  kernels::swiglu_forward(base16, base16 + inner, 2 * inner, d_out.get(), rows, inner, nullptr);
  kernels::swiglu_backward(d_dout.get(), base16, base16 + inner, 2 * inner, d_dgate_up.get(),
                           d_dgate_up.get() + inner, 2 * inner, rows, inner, nullptr);
  expect_close("swiglu fused forward, bf16 gate_up", d_out.download(), out16, kF32AtolRel,
               kF32Rtol);
  expect_close("swiglu fused backward, bf16 gate_up", d_dgate_up.download(), dgate_up16,
               kF32AtolRel, kF32Rtol);
  double largest = 0;
  for (std::size_t i = 0; i < out16.size(); ++i)
    largest = std::max(largest, std::abs(double(out16[i]) - double(fused_out[i])));
  expect(largest > 0, "bf16 gate_up output differs from the fp32 one");
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

// Bits of a host or device vector, for bit-for-bit comparisons.
template <typename T>
std::vector<std::uint32_t> bits_of(const std::vector<T>& values) {
  std::vector<std::uint32_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t word = 0;
    std::memcpy(&word, &values[i], sizeof(T));
    bits[i] = word;
  }
  return bits;
}

// One moment in both places: host storage for the CPU op (fp32 or bf16 bits) and the device
// buffer the kernel updates.
struct MomentPair {
  bool bf16;
  std::vector<float> host_f32;
  std::vector<std::uint16_t> host_bf16;
  DeviceBuffer<float> device_f32;
  DeviceBuffer<kernels::bf16> device_bf16;
  MomentPair(bool in_bf16, std::size_t n)
      : bf16(in_bf16),
        host_f32(in_bf16 ? 0 : n, 0.0f),
        host_bf16(in_bf16 ? n : 0, 0),
        device_f32(host_f32),
        device_bf16(std::vector<kernels::bf16>(in_bf16 ? n : 0, kernels::bf16{})) {}
  Tensor host_view() {
    return bf16 ? Tensor::view_of(host_bf16.data(), {static_cast<std::int64_t>(host_bf16.size())},
                                  DType::bf16)
                : view(host_f32, {static_cast<std::int64_t>(host_f32.size())});
  }
  bool same_bits() const {
    return bf16 ? bits_of(device_bf16.download()) == bits_of(host_bf16)
                : bits_of(device_f32.download()) == bits_of(host_f32);
  }
};

void run_adamw_kernel(DeviceBuffer<float>& p, DeviceBuffer<float>& g, MomentPair& m, MomentPair& v,
                      int n, const kernels::AdamWKernelParams& k) {
  if (m.bf16 && v.bf16) {
    kernels::adamw_step(p.get(), g.get(), m.device_bf16.get(), v.device_bf16.get(), n, k, nullptr);
  } else if (m.bf16) {
    kernels::adamw_step(p.get(), g.get(), m.device_bf16.get(), v.device_f32.get(), n, k, nullptr);
  } else if (v.bf16) {
    kernels::adamw_step(p.get(), g.get(), m.device_f32.get(), v.device_bf16.get(), n, k, nullptr);
  } else {
    kernels::adamw_step(p.get(), g.get(), m.device_f32.get(), v.device_f32.get(), n, k, nullptr);
  }
}

// The CPU op is element-wise and deterministic, and the kernel does its operations in the same
// order with each rounded on its own: parameters and both moments equal the CPU's bit for bit,
// for fp32 moments and for bf16 ones (the precision-aware optimizer), in every combination.
GPU_TEST(adamw_moments_fp32_and_bf16_bit_for_bit) {
  const int n = 4099;
  for (const auto& [bf16_avg, bf16_avg_sq] : {std::pair{false, false}, std::pair{true, true},
                                              std::pair{true, false}, std::pair{false, true}}) {
    std::vector<float> p = random_floats(n, 21, -2.0f, 2.0f);
    DeviceBuffer<float> d_p(p), d_g(n);
    MomentPair m(bf16_avg, n), v(bf16_avg_sq, n);
    for (int step = 1; step <= 5; ++step) {
      // Gradients over many magnitudes, so the bf16 moments round in every binade.
      std::vector<float> g = random_floats(n, 40 + step, -1.0f, 1.0f);
      for (int i = 0; i < n; ++i) g[i] = std::ldexp(g[i], (i * 7) % 40 - 30);
      const bool decay = step % 2 == 1;
      const ops::AdamWParams params{
          .lr = 3e-3, .weight_decay = 0.1, .step = step, .grad_scale = 0.25};
      ops::adamw_step(cpu, view(p, {n}), view(g, {n}), m.host_view(), v.host_view(), params, decay);
      d_g.upload(g);
      const kernels::AdamWKernelParams k{.lr = 3e-3,
                                         .weight_decay = 0.1,
                                         .step = step,
                                         .grad_scale = 0.25,
                                         .apply_weight_decay = decay};
      run_adamw_kernel(d_p, d_g, m, v, n, k);
    }
    const std::string name = std::string("adamw exp_avg ") + (bf16_avg ? "bf16" : "fp32") +
                             ", exp_avg_sq " + (bf16_avg_sq ? "bf16" : "fp32");
    expect(bits_of(d_p.download()) == bits_of(p), name + ": parameters equal the CPU's bits");
    expect(m.same_bits(), name + ": exp_avg equals the CPU's bits");
    expect(v.same_bits(), name + ": exp_avg_sq equals the CPU's bits");
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
