// The chunked gated delta rule kernels (kernels/gated_delta_rule_chunked*.cu) against the CPU's
// chunked op, forward and backward, on both of their paths: fp32 products (fp32 runs) at fp32
// round-off, tensor-core products (bf16 operand splits, fp32 accumulation; bf16_mixed) at
// about 16 bits; and against the token-by-token reference kernels, which they replace as the
// default. Shapes: Qwen3.5 / Qwen3-Next's 16 key / 32 value heads of 128 (sequences of 1, 63,
// 64, 65 and 129 tokens in one bin), other head ratios and dims that are no multiple of 16,
// short chunks, an empty sequence, and a sequence of 4,160 tokens (65 chunks).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/arena.hpp"
#include "gpu_test.hpp"
#include "hybrid.hpp"
#include "ops/gated_delta_rule.hpp"

namespace dyncp::gpu_test {
namespace {

struct RuleShape {
  int hk, hv, dk, dv, chunk;
  std::vector<std::int32_t> cu;
};

struct RuleData {
  RuleShape shape;
  std::vector<float> q, k, v, g, beta, init, dout, d_final;
  std::vector<std::int32_t> first_chunk;
  int tokens = 0, sequences = 0, chunks = 0;
};

struct RuleResult {
  std::vector<float> out, final_state, states, dq, dk, dv, dg, dbeta, d_init;
};

std::vector<float> unit_rows(std::size_t rows, std::size_t n, std::uint64_t seed) {
  std::vector<float> values = random_floats(rows * n, seed);
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) sum += double(values[r * n + j]) * values[r * n + j];
    for (std::size_t j = 0; j < n; ++j) values[r * n + j] /= static_cast<float>(std::sqrt(sum));
  }
  return values;
}

RuleData make_data(const RuleShape& shape, std::uint64_t seed) {
  RuleData d;
  d.shape = shape;
  d.tokens = shape.cu.back();
  d.sequences = static_cast<int>(shape.cu.size()) - 1;
  const auto t = static_cast<std::size_t>(d.tokens), s = static_cast<std::size_t>(d.sequences);
  d.q = unit_rows(t * shape.hk, shape.dk, seed);
  d.k = unit_rows(t * shape.hk, shape.dk, seed + 1);
  d.v = random_floats(t * shape.hv * shape.dv, seed + 2);
  d.g = random_floats(t * shape.hv, seed + 3, -1.5f, -0.01f);
  d.beta = random_floats(t * shape.hv, seed + 4, 0.05f, 0.95f);
  d.init = random_floats(s * shape.hv * shape.dk * shape.dv, seed + 5, -0.5f, 0.5f);
  d.dout = random_floats(t * shape.hv * shape.dv, seed + 6);
  d.d_final = random_floats(s * shape.hv * shape.dk * shape.dv, seed + 7, -0.5f, 0.5f);
  d.first_chunk.resize(s);
  for (int i = 0; i < d.sequences; ++i) {
    d.first_chunk[static_cast<std::size_t>(i)] = d.chunks;
    d.chunks += (shape.cu[i + 1] - shape.cu[i] + shape.chunk - 1) / shape.chunk;
  }
  return d;
}

RuleResult empty_result(const RuleData& d) {
  const RuleShape& s = d.shape;
  RuleResult r;
  r.out.resize(d.v.size());
  r.final_state.resize(d.init.size());
  r.states.resize(static_cast<std::size_t>(d.chunks) * s.hv * s.dk * s.dv);
  r.dq.resize(d.q.size());
  r.dk.resize(d.k.size());
  r.dv.resize(d.v.size());
  r.dg.resize(d.g.size());
  r.dbeta.resize(d.beta.size());
  r.d_init.resize(d.init.size());
  return r;
}

RuleResult cpu_rule(RuleData& d) {
  const RuleShape& s = d.shape;
  RuleResult r = empty_result(d);
  core::Arena arena("gdr chunked test");
  ops::OpContext ctx;
  ctx.scratch = &arena;
  const Shape qk{d.tokens, s.hk, s.dk}, vs{d.tokens, s.hv, s.dv}, gs{d.tokens, s.hv},
      ss{d.sequences, s.hv, s.dk, s.dv};
  std::vector<std::int32_t> cu = s.cu;
  const ops::GatedDeltaRuleInputs in{view(d.q, qk),   view(d.k, qk),    view(d.v, vs),
                                     view(d.g, gs),   view(d.beta, gs), view(cu, {d.sequences + 1}),
                                     view(d.init, ss)};
  const ops::GatedDeltaRuleParams params{.scale = 1.0 / std::sqrt(double(s.dk)),
                                         .chunk_size = s.chunk};
  ops::GatedDeltaRuleSaved saved{view(r.states, {d.chunks, s.hv, s.dk, s.dv})};
  ops::gated_delta_rule_chunked_forward(ctx, in, params, view(r.out, vs), view(r.final_state, ss),
                                        saved);
  ops::gated_delta_rule_chunked_backward(ctx, view(d.dout, vs), view(d.d_final, ss), in, params,
                                         saved,
                                         {view(r.dq, qk), view(r.dk, qk), view(r.dv, vs),
                                          view(r.dg, gs), view(r.dbeta, gs), view(r.d_init, ss)});
  return r;
}

enum class Kernels { chunked_fp32, chunked_tensor_cores, token };

// The device kernels on the same inputs; `seconds` (optional) gets the forward's and the
// backward's wall time, each measured to a device synchronisation.
RuleResult gpu_rule(const RuleData& d, Kernels kernels, double* seconds = nullptr) {
  const RuleShape& s = d.shape;
  RuleResult r = empty_result(d);
  DeviceBuffer<float> d_q(d.q), d_k(d.k), d_v(d.v), d_g(d.g), d_beta(d.beta), d_init(d.init),
      d_out(r.out.size()), d_final(r.final_state.size()), d_states(r.states.size()), d_dout(d.dout),
      d_dfinal(d.d_final), d_dq(r.dq.size()), d_dk(r.dk.size()), d_dv(r.dv.size()),
      d_dg(r.dg.size()), d_dbeta(r.dbeta.size()), d_dinit(r.d_init.size());
  DeviceBuffer<std::int32_t> d_cu(s.cu), d_first(d.first_chunk);
  kernels::GatedDeltaRuleArgs args;
  args.q = d_q.get();
  args.k = d_k.get();
  args.v = d_v.get();
  args.g = d_g.get();
  args.beta = d_beta.get();
  args.cu_seqlens = d_cu.get();
  args.first_chunk = d_first.get();
  args.initial_state = d_init.get();
  args.sequences = d.sequences;
  args.key_heads = s.hk;
  args.value_heads = s.hv;
  args.key_dim = s.dk;
  args.value_dim = s.dv;
  args.chunk = s.chunk;
  args.scale = static_cast<float>(1.0 / std::sqrt(double(s.dk)));
  args.tokens = d.tokens;
  args.chunks = d.chunks;
  args.tensor_cores = kernels == Kernels::chunked_tensor_cores;
  const bool token = kernels == Kernels::token;
  const std::int64_t forward_scratch =
      token ? 1 : kernels::gated_delta_rule_chunked_forward_scratch(args);
  const std::int64_t backward_scratch =
      token ? kernels::gated_delta_rule_backward_scratch(args, d.tokens)
            : kernels::gated_delta_rule_chunked_backward_scratch(args);
  DeviceBuffer<float> d_fwd(static_cast<std::size_t>(forward_scratch)),
      d_bwd(static_cast<std::size_t>(backward_scratch));
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  if (token) {
    kernels::gated_delta_rule_forward(args, d_out.get(), d_final.get(), d_states.get(), nullptr);
  } else {
    kernels::gated_delta_rule_chunked_forward(args, d_out.get(), d_final.get(), d_states.get(),
                                              d_fwd.get(), nullptr);
  }
  DYNCP_CUDA_CHECK(cudaDeviceSynchronize());
  if (seconds != nullptr) seconds[0] = std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  if (token) {
    kernels::gated_delta_rule_backward(args, d.tokens, d_states.get(), d_dout.get(), d_dfinal.get(),
                                       d_dq.get(), d_dk.get(), d_dv.get(), d_dg.get(),
                                       d_dbeta.get(), d_dinit.get(), d_bwd.get(), nullptr);
  } else {
    kernels::gated_delta_rule_chunked_backward(args, d_states.get(), d_dout.get(), d_dfinal.get(),
                                               d_dq.get(), d_dk.get(), d_dv.get(), d_dg.get(),
                                               d_dbeta.get(), d_dinit.get(), d_bwd.get(), nullptr);
  }
  DYNCP_CUDA_CHECK(cudaDeviceSynchronize());
  if (seconds != nullptr) seconds[1] = std::chrono::duration<double>(Clock::now() - start).count();
  r.out = d_out.download();
  r.final_state = d_final.download();
  r.states = d_states.download();
  r.dq = d_dq.download();
  r.dk = d_dk.download();
  r.dv = d_dv.download();
  r.dg = d_dg.download();
  r.dbeta = d_dbeta.download();
  r.d_init = d_dinit.download();
  return r;
}

struct Tolerance {
  double forward_atol, forward_rtol, grad_atol, grad_rtol;
};

// fp32 products: the CPU's chunked form in another order (T = L⁻¹ formed, then products).
constexpr Tolerance kFp32{kF32AtolRel, kF32Rtol, kF32AtolRel, kF32Rtol};
// Tensor cores: each fp32 operand split into two bf16 parts (high + low), three bf16 products
// with fp32 accumulation per fp32 product, about 16 significant bits (docs/cuda.md).
constexpr Tolerance kTensorCores{1e-4, 1e-3, 1e-4, 1e-3};

void compare(const std::string& name, const RuleResult& got, const RuleResult& want,
             const Tolerance& tol) {
  expect_close(name + " out", got.out, want.out, tol.forward_atol, tol.forward_rtol);
  expect_close(name + " final state", got.final_state, want.final_state, tol.forward_atol,
               tol.forward_rtol);
  expect_close(name + " chunk states", got.states, want.states, tol.forward_atol, tol.forward_rtol);
  expect_close(name + " dq", got.dq, want.dq, tol.grad_atol, tol.grad_rtol);
  expect_close(name + " dk", got.dk, want.dk, tol.grad_atol, tol.grad_rtol);
  expect_close(name + " dv", got.dv, want.dv, tol.grad_atol, tol.grad_rtol);
  expect_close(name + " dg", got.dg, want.dg, tol.grad_atol, tol.grad_rtol);
  expect_close(name + " dbeta", got.dbeta, want.dbeta, tol.grad_atol, tol.grad_rtol);
  expect_close(name + " d_initial_state", got.d_init, want.d_init, tol.grad_atol, tol.grad_rtol);
}

void check_both_paths(const std::string& name, const RuleShape& shape, std::uint64_t seed) {
  RuleData data = make_data(shape, seed);
  const RuleResult want = cpu_rule(data);
  compare(name + " fp32", gpu_rule(data, Kernels::chunked_fp32), want, kFp32);
  compare(name + " tensor cores", gpu_rule(data, Kernels::chunked_tensor_cores), want,
          kTensorCores);
}

// Qwen3.5-35B-A3B / Qwen3-Next: 16 key heads, 32 value heads, dk = dv = 128; sequences of 1,
// 63, 64, 65 and 2 x 64 + 1 tokens in one bin.
GPU_TEST(gated_delta_rule_chunked_qwen35_heads) {
  check_both_paths("qwen3.5 heads", {16, 32, 128, 128, 64, {0, 1, 64, 128, 193, 322}}, 80);
}

// Dims no multiple of 16, head ratios 1, 2 and 4, short chunks and an empty sequence.
GPU_TEST(gated_delta_rule_chunked_odd_shapes) {
  check_both_paths("ratio 2, chunk 8", {2, 4, 24, 20, 8, {0, 21, 21, 29, 34}}, 81);
  check_both_paths("ratio 1, chunk 64", {3, 3, 16, 40, 64, {0, 1, 66, 129}}, 82);
  check_both_paths("ratio 4, chunk 5, wide values", {1, 4, 8, 72, 5, {0, 0, 17, 18}}, 83);
}

// One sequence of 4,160 tokens (65 chunks) and one of 64: the serial chain at length.
GPU_TEST(gated_delta_rule_chunked_long_sequence) {
  check_both_paths("4160 tokens", {1, 2, 32, 32, 64, {0, 4160, 4224}}, 84);
}

// The default chunked kernels against the token-by-token reference on the device; on a GPU
// (tools/gpu-check.sh) at Qwen3.5-35B-A3B's heads and 8,192 tokens per rank in four sequences
// of 2,048, with the times of both (emulation: a small shape, the same plumbing).
GPU_TEST(gated_delta_rule_chunked_vs_token_kernels) {
#ifdef DYNCP_CUDA_EMULATION
  const RuleShape shape{2, 4, 32, 32, 64, {0, 100, 230}};
#else
  const RuleShape shape{16, 32, 128, 128, 64, {0, 2048, 4096, 6144, 8192}};
#endif
  RuleData data = make_data(shape, 85);
  double token_s[2] = {0, 0}, fp32_s[2] = {0, 0}, tc_s[2] = {0, 0};
  gpu_rule(data, Kernels::chunked_tensor_cores);  // warm-up: first launches, allocations
  const RuleResult token = gpu_rule(data, Kernels::token, token_s);
  const RuleResult fp32 = gpu_rule(data, Kernels::chunked_fp32, fp32_s);
  const RuleResult tc = gpu_rule(data, Kernels::chunked_tensor_cores, tc_s);
  compare("chunked fp32 vs token", fp32, token, kFp32);
  compare("chunked tensor cores vs token", tc, token, kTensorCores);
  std::printf(
      "gated delta rule timing (T %d, Hk %d, Hv %d, dk %d, dv %d): token fwd %.3f ms bwd %.3f "
      "ms; chunked fp32 fwd %.3f ms bwd %.3f ms; chunked tensor cores fwd %.3f ms bwd %.3f ms; "
      "fwd+bwd speedup tensor cores vs token %.2fx\n",
      data.tokens, shape.hk, shape.hv, shape.dk, shape.dv, 1e3 * token_s[0], 1e3 * token_s[1],
      1e3 * fp32_s[0], 1e3 * fp32_s[1], 1e3 * tc_s[0], 1e3 * tc_s[1],
      (token_s[0] + token_s[1]) / std::max(tc_s[0] + tc_s[1], 1e-12));
}

}  // namespace
}  // namespace dyncp::gpu_test
