// cuDNN's fused attention (model.attention_backend=fused) against our own flash kernel against
// the CPU op, through the ops' CUDA backend, on both seed models' attention shapes: Qwen3-30B-A3B
// (32 query heads / 4 kv heads, d 128) and Qwen3.5-35B-A3B (16 / 2, d 256), on packed whole
// sequences, a CP rank's zigzag rows against keys all-gathered in rank order (several blocks
// merged by lse), a ring block, and a sliding window. Where cuDNN's support check rejects a
// shape the test says so and checks our kernel alone (auto then takes our kernel). Then one
// timing line per shape: forward + backward of both kernels on a 8,192-token bin.
// Built only with cuDNN (DYNCP_HAVE_CUDNN), so only on a real GPU (tools/gpu-check.sh phase 2).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "core/arena.hpp"
#include "gpu_test.hpp"
#include "ops/attention.hpp"
#include "ops/attention_backend.hpp"
#include "ops/cuda/cuda_backend.hpp"

namespace dyncp::gpu_test {
namespace {

struct Layout {
  std::vector<std::int32_t> q_cu{0}, kv_cu{0}, q_pos, kv_pos;
  int window = 0;
  void add(const std::vector<int>& q, const std::vector<int>& k) {
    q_pos.insert(q_pos.end(), q.begin(), q.end());
    kv_pos.insert(kv_pos.end(), k.begin(), k.end());
    q_cu.push_back(static_cast<std::int32_t>(q_pos.size()));
    kv_cu.push_back(static_cast<std::int32_t>(kv_pos.size()));
  }
};

std::vector<int> range(int begin, int end) {
  std::vector<int> values(std::max(0, end - begin));
  std::iota(values.begin(), values.end(), begin);
  return values;
}

std::vector<int> zigzag(int length, int c, int rank) {
  const int chunk = length / (2 * c);
  std::vector<int> rows = range(rank * chunk, (rank + 1) * chunk);
  const std::vector<int> tail = range((2 * c - 1 - rank) * chunk, (2 * c - rank) * chunk);
  rows.insert(rows.end(), tail.begin(), tail.end());
  return rows;
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

Tensor upload(core::Arena& arena, std::vector<float>& host, const Shape& shape) {
  const Tensor t = arena.allocate(shape, DType::f32);
  t.copy_from(view(host, shape));
  return t;
}

Tensor upload_i32(core::Arena& arena, std::vector<std::int32_t>& host) {
  const Tensor t = arena.allocate({static_cast<std::int64_t>(host.size())}, DType::i32);
  t.copy_from(view(host, {static_cast<std::int64_t>(host.size())}));
  return t;
}

// Forward and backward through ops:: on the device (bf16 products), fused or not; `repeats` > 0
// times that many forward + backward pairs after the first and gives their mean in ms in `ms`.
Result run_device(Layout& l, std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                  std::vector<float>& dout, int hq, int hkv, int d, bool fused, int repeats = 0,
                  float* ms = nullptr) {
  ops::cuda::install_backend();
  ops::select_fused_attention(fused);
  const std::int64_t tq = static_cast<std::int64_t>(l.q_pos.size());
  const std::int64_t tk = static_cast<std::int64_t>(l.kv_pos.size());
  const auto seqs = static_cast<std::int64_t>(l.q_cu.size());
  core::Arena arena("cudnn-attention-test", std::size_t{256} << 20, core::Device::cuda);
  core::Arena scratch("cudnn-attention-scratch", std::size_t{512} << 20, core::Device::cuda);
  const Shape qs{tq, hq, d}, ks{tk, hkv, d};
  const Tensor dq = arena.allocate(qs, DType::f32), dk = arena.allocate(ks, DType::f32),
               dv = arena.allocate(ks, DType::f32), out = arena.allocate(qs, DType::f32);
  ops::AttentionSaved saved{arena.allocate({tq, hq}, DType::f32)};
  const Tensor q_d = upload(arena, q, qs), k_d = upload(arena, k, ks), v_d = upload(arena, v, ks),
               dout_d = upload(arena, dout, qs);
  ops::VarlenAttentionLayout layout{view(l.q_cu, {seqs}), view(l.kv_cu, {seqs}),
                                    upload_i32(arena, l.q_pos), upload_i32(arena, l.kv_pos),
                                    l.window};
  ops::OpContext ctx;
  ctx.device = core::Device::cuda;
  ctx.scratch = &scratch;
  ctx.precision = ops::ComputePrecision::bf16;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const auto step = [&] {
    ops::attention_forward(ctx, q_d, k_d, v_d, layout, scale, out, saved);
    ops::attention_backward(ctx, dout_d, q_d, k_d, v_d, out, saved, layout, scale, dq, dk, dv);
  };
  step();
  if (repeats > 0) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, nullptr);
    for (int i = 0; i < repeats; ++i) step();
    cudaEventRecord(stop, nullptr);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(ms, start, stop);
    *ms /= static_cast<float>(repeats);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  ops::select_fused_attention(false);
  return {to_host(out), to_host(saved.lse), to_host(dq), to_host(dk), to_host(dv)};
}

std::string support(int hq, int hkv, int d, int window) {
  const ops::FusedAttention* fused = ops::installed_fused_attention();
  if (fused == nullptr) return "no fused attention installed";
  return fused->unsupported_reason({hq, hkv, d, window});
}

void compare(const std::string& name, const Result& got, const Result& want) {
  expect_close(name + " out", got.out, want.out, kBf16AtolRel, kBf16Rtol);
  std::vector<float> a, b;
  for (std::size_t i = 0; i < want.lse.size(); ++i) {
    expect(std::isinf(want.lse[i]) == std::isinf(got.lse[i]), name + " lse -inf pattern");
    if (!std::isinf(want.lse[i]) && !std::isinf(got.lse[i])) {
      a.push_back(got.lse[i]);
      b.push_back(want.lse[i]);
    }
  }
  expect_close(name + " lse", a, b, 1e-3, 1e-3);
  expect_close(name + " dq", got.dq, want.dq, 2 * kBf16AtolRel, 2.5 * kBf16Rtol);
  expect_close(name + " dk", got.dk, want.dk, 2 * kBf16AtolRel, 2.5 * kBf16Rtol);
  expect_close(name + " dv", got.dv, want.dv, 2 * kBf16AtolRel, 2.5 * kBf16Rtol);
}

void check_shape(const std::string& model, int hq, int hkv, int d) {
  std::vector<Layout> layouts(4);
  for (int length : {1, 63, 200, 777}) layouts[0].add(range(0, length), range(0, length));
  for (int length : {256, 1024}) {  // all-gathered keys in rank order (c = 4, rank 1)
    std::vector<int> keys;
    for (int r = 0; r < 4; ++r) {
      const auto shard = zigzag(length, 4, r);
      keys.insert(keys.end(), shard.begin(), shard.end());
    }
    layouts[1].add(zigzag(length, 4, 1), keys);
  }
  layouts[2].add(zigzag(512, 2, 1), zigzag(512, 2, 0));  // a ring step: rank 0's block
  for (int length : {100, 700}) layouts[3].add(range(0, length), range(0, length));
  layouts[3].window = 128;
  const char* names[] = {"packed whole sequences", "zigzag vs rank-order keys", "ring block",
                         "window 128"};
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    Layout& l = layouts[i];
    const std::string name = model + " " + names[i];
    const std::size_t tq = l.q_pos.size(), tk = l.kv_pos.size();
    std::vector<float> q = round_to_bf16(random_floats(tq * hq * d, 1, -2, 2));
    std::vector<float> k = round_to_bf16(random_floats(tk * hkv * d, 2, -2, 2));
    std::vector<float> v = round_to_bf16(random_floats(tk * hkv * d, 3));
    std::vector<float> dout = round_to_bf16(random_floats(tq * hq * d, 4));
    // The CPU op on the same bf16-rounded values.
    Result cpu{std::vector<float>(q.size()), std::vector<float>(tq * hq),
               std::vector<float>(q.size()), std::vector<float>(k.size()),
               std::vector<float>(v.size())};
    core::Arena host("cudnn-attention-cpu");
    ops::OpContext ctx;
    ctx.scratch = &host;
    const auto seqs = static_cast<std::int64_t>(l.q_cu.size());
    const auto tq64 = static_cast<std::int64_t>(tq), tk64 = static_cast<std::int64_t>(tk);
    const ops::VarlenAttentionLayout layout{view(l.q_cu, {seqs}), view(l.kv_cu, {seqs}),
                                            view(l.q_pos, {tq64}), view(l.kv_pos, {tk64}),
                                            l.window};
    const Shape qs{tq64, hq, d}, ks{tk64, hkv, d};
    ops::AttentionSaved saved{view(cpu.lse, {tq64, hq})};
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    ops::attention_forward(ctx, view(q, qs), view(k, ks), view(v, ks), layout, scale,
                           view(cpu.out, qs), saved);
    ops::attention_backward(ctx, view(dout, qs), view(q, qs), view(k, ks), view(v, ks),
                            view(cpu.out, qs), saved, layout, scale, view(cpu.dq, qs),
                            view(cpu.dk, ks), view(cpu.dv, ks));
    compare(name + " flash", run_device(l, q, k, v, dout, hq, hkv, d, false), cpu);
    ops::cuda::install_backend();
    const std::string why_not = support(hq, hkv, d, l.window);
    if (!why_not.empty()) {
      std::printf("  %s: cuDNN rejects the shape (auto takes our kernel): %s\n", name.c_str(),
                  why_not.c_str());
      continue;
    }
    compare(name + " cudnn", run_device(l, q, k, v, dout, hq, hkv, d, true), cpu);
  }
  // Timing: forward + backward of one 8,192-token bin (two 4,096-token sequences).
  Layout bin;
  for (int s = 0; s < 2; ++s) bin.add(range(0, 4096), range(0, 4096));
  const std::size_t t = bin.q_pos.size();
  std::vector<float> q = random_floats(t * hq * d, 5), k = random_floats(t * hkv * d, 6),
                     v = random_floats(t * hkv * d, 7), dout = random_floats(t * hq * d, 8);
  float flash_ms = 0, cudnn_ms = 0;
  run_device(bin, q, k, v, dout, hq, hkv, d, false, 5, &flash_ms);
  const bool has_cudnn = support(hq, hkv, d, 0).empty();
  if (has_cudnn) run_device(bin, q, k, v, dout, hq, hkv, d, true, 5, &cudnn_ms);
  std::printf("  timing %s, 8192 tokens (2 x 4096), forward + backward: flash %.3f ms, cuDNN %s\n",
              model.c_str(), flash_ms,
              has_cudnn ? (std::to_string(cudnn_ms) + " ms (flash / cuDNN " +
                           std::to_string(flash_ms / cudnn_ms) + "x)")
                              .c_str()
                        : "not supported");
}

GPU_TEST(fused_sdpa_qwen3_30b_a3b_shape) {
  check_shape("Qwen3-30B-A3B (32/4, d 128)", 32, 4, 128);
}

GPU_TEST(fused_sdpa_qwen3_5_35b_a3b_shape) {
  check_shape("Qwen3.5-35B-A3B (16/2, d 256)", 16, 2, 256);
}

}  // namespace
}  // namespace dyncp::gpu_test
