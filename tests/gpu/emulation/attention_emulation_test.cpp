// The attention kernels' source, run on the host by the SIMT emulator (simt_emulation.hpp) and
// compared with the CPU op: checks the tiling, masks, skips, barriers and WMMA operand
// placement without a GPU. Small shapes (every CUDA thread is a host thread). Exit 0 = pass.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "core/dtype.hpp"
#include "cuda_check.hpp"
#include "ops/attention.hpp"
#include "simt_emulation.hpp"
// The kernels under test (after the emulator's keyword definitions).
#include "attention_backward_kernel.cuh"
#include "attention_forward_kernel.cuh"

namespace dyncp::kernels::attention_detail {
namespace forward {
alignas(128) unsigned char smem[232448];
}
namespace backward {
alignas(128) unsigned char smem[232448];
}
}  // namespace dyncp::kernels::attention_detail

namespace {

using dyncp::core::DType;
using dyncp::core::Shape;
using dyncp::core::Tensor;
using dyncp::kernels::AttentionShape;
namespace fwd = dyncp::kernels::attention_detail::forward;
namespace bwd = dyncp::kernels::attention_detail::backward;

int failures = 0;

template <typename T>
Tensor view(std::vector<T>& data, const Shape& shape, DType dtype) {
  return Tensor::view_of(data.data(), shape, dtype);
}

std::vector<float> random_bf16(std::size_t n, unsigned seed, float low, float high) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(n);
  for (float& v : values)
    v = dyncp::core::bf16_bits_to_float(dyncp::core::float_to_bf16_bits(dist(engine)));
  return values;
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = __float2bfloat16_rn(values[i]);
  return out;
}

void compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
             double atol_rel, double rtol) {
  double max_want = 0;
  for (float w : want) max_want = std::max(max_want, std::isinf(w) ? 0.0 : std::fabs(double(w)));
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (want[i] != got[i]) ++bad;
      continue;
    }
    const double err = std::fabs(double(got[i]) - want[i]);
    const double ratio = err == 0 ? 0 : err / (atol_rel * max_want + rtol * std::fabs(want[i]));
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::printf("  %s %s: worst [%zu] got %g want %g (error/bound %.3g)\n", bad ? "FAILED" : "ok",
              what.c_str(), worst, want.empty() ? 0.0 : got[worst],
              want.empty() ? 0.0 : want[worst], worst_ratio);
  if (bad) ++failures;
}

struct Sequence {
  std::vector<int> q_positions, kv_positions;
};

std::vector<int> range(int begin, int end) {
  std::vector<int> v(std::max(0, end - begin));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

void check(const std::string& name, const std::vector<Sequence>& seqs, int hq, int hkv, int d) {
  std::printf("[%s]\n", name.c_str());
  std::vector<std::int32_t> q_cu = {0}, kv_cu = {0}, q_pos, kv_pos;
  int max_q = 0, max_kv = 0;
  for (const Sequence& s : seqs) {
    q_pos.insert(q_pos.end(), s.q_positions.begin(), s.q_positions.end());
    kv_pos.insert(kv_pos.end(), s.kv_positions.begin(), s.kv_positions.end());
    q_cu.push_back(int(q_pos.size()));
    kv_cu.push_back(int(kv_pos.size()));
    max_q = std::max(max_q, int(s.q_positions.size()));
    max_kv = std::max(max_kv, int(s.kv_positions.size()));
  }
  const int tq = int(q_pos.size()), tk = int(kv_pos.size()), ns = int(seqs.size());
  const double scale = 1.0 / std::sqrt(double(d));
  auto q = random_bf16(std::size_t(tq) * hq * d, 1, -2, 2),
       k = random_bf16(std::size_t(tk) * hkv * d, 2, -2, 2);
  auto v = random_bf16(std::size_t(tk) * hkv * d, 3, -1, 1),
       dout = random_bf16(std::size_t(tq) * hq * d, 4, -1, 1);
  std::vector<float> out(q.size()), lse(std::size_t(tq) * hq), dq(q.size()), dk(k.size()),
      dv(v.size());

  dyncp::core::Arena arena("emulation");
  dyncp::ops::OpContext cpu{};
  cpu.scratch = &arena;
  const dyncp::ops::VarlenAttentionLayout layout{
      view(q_cu, {ns + 1}, DType::i32), view(kv_cu, {ns + 1}, DType::i32),
      view(q_pos, {tq}, DType::i32), view(kv_pos, {tk}, DType::i32)};
  dyncp::ops::AttentionSaved saved{view(lse, {tq, hq}, DType::f32)};
  const Shape qs{tq, hq, d}, ks{tk, hkv, d};
  dyncp::ops::attention_forward(cpu, view(q, qs, DType::f32), view(k, ks, DType::f32),
                                view(v, ks, DType::f32), layout, scale, view(out, qs, DType::f32),
                                saved);
  dyncp::ops::attention_backward(
      cpu, view(dout, qs, DType::f32), view(q, qs, DType::f32), view(k, ks, DType::f32),
      view(v, ks, DType::f32), view(out, qs, DType::f32), saved, layout, scale,
      view(dq, qs, DType::f32), view(dk, ks, DType::f32), view(dv, ks, DType::f32));

  AttentionShape shape;
  shape.q_tokens = tq;
  shape.kv_tokens = tk;
  shape.q_heads = hq;
  shape.kv_heads = hkv;
  shape.head_dim = d;
  shape.num_seqs = ns;
  shape.max_q_rows = max_q;
  shape.max_kv_rows = max_kv;
  shape.q_cu_seqlens = q_cu.data();
  shape.kv_cu_seqlens = kv_cu.data();
  shape.q_positions = q_pos.data();
  shape.kv_positions = kv_pos.data();
  shape.scale = float(scale);
  const auto q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v), dout16 = to_bf16(dout);
  std::vector<float> g_out(out.size(), NAN), g_lse(lse.size(), NAN), g_dq(dq.size(), 0.0f),
      g_dk(dk.size(), NAN), g_dv(dv.size(), NAN), delta(lse.size());
  simt::launch(dim3((max_q + fwd::kBlockM - 1) / fwd::kBlockM, hq, ns),
               dim3(dyncp::kernels::attention_detail::kThreads), [&] {
                 fwd::attention_forward_kernel(shape, q16.data(), k16.data(), v16.data(),
                                               g_out.data(), g_lse.data());
               });
  const std::int64_t rows = std::int64_t(tq) * hq;
  simt::launch(dim3(unsigned((rows * 32 + 255) / 256)), dim3(256), [&] {
    bwd::attention_delta_kernel(dout16.data(), g_out.data(), delta.data(), rows, d);
  });
  simt::launch(dim3((max_kv + bwd::kBlockN - 1) / bwd::kBlockN, hkv, ns),
               dim3(dyncp::kernels::attention_detail::kThreads), [&] {
                 bwd::attention_backward_kernel(shape, q16.data(), k16.data(), v16.data(),
                                                dout16.data(), g_lse.data(), delta.data(),
                                                g_dq.data(), g_dk.data(), g_dv.data(), false);
               });
  compare("out", g_out, out, 1e-2, 2e-2);
  compare("lse", g_lse, lse, 1e-3, 1e-3);
  compare("dq", g_dq, dq, 2e-2, 5e-2);
  compare("dk", g_dk, dk, 2e-2, 5e-2);
  compare("dv", g_dv, dv, 2e-2, 5e-2);
}

}  // namespace

int main() {
  // Tails of the 64 / 32 tiles, an empty sequence, GQA 2, a skipped tile (keys 64.. for queries
  // 0..63), zigzag rows, a key block with queries that see nothing, and shuffled keys.
  check("whole sequences d=16 Hq=2 Hkv=1",
        {{range(0, 70), range(0, 70)}, {{}, {}}, {range(0, 5), range(0, 5)}}, 2, 1, 16);
  std::vector<int> zig = range(0, 10);
  const auto tail = range(30, 40);
  zig.insert(zig.end(), tail.begin(), tail.end());
  std::vector<int> shuffled = range(0, 40);
  std::reverse(shuffled.begin(), shuffled.end());
  std::rotate(shuffled.begin(), shuffled.begin() + 13, shuffled.end());
  check("zigzag, key block, shuffled keys d=32 Hq=3 Hkv=3",
        {{zig, range(0, 40)}, {range(0, 40), range(20, 35)}, {range(0, 40), shuffled}}, 3, 3, 32);
  check("GQA 4, d=64, lengths 1 / 65 / 130",
        {{range(0, 1), range(0, 1)}, {range(0, 65), range(0, 65)}, {range(0, 130), range(0, 130)}},
        4, 1, 64);
  std::printf("attention emulation: %s\n", failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
