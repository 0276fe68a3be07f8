// Flash attention (forward and backward) against the CPU op on the same bf16-rounded q, k, v
// and dout. The cases cover every tile path: sequence lengths off the 64 / 32 tile sizes,
// empty sequences and queries that see no key, GQA ratios 1 to 4, head dims 16 to 256,
// zigzag query subsets (a CP rank's rows), a key block holding part of the sequence, keys in
// shuffled order, and tiles skipped because all their keys are in the future.
#include "attention.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/arena.hpp"
#include "gpu_test.hpp"
#include "ops/attention.hpp"

namespace dyncp::gpu_test {
namespace {

struct Sequence {
  std::vector<int> q_positions;   // the rows this rank holds, in row order
  std::vector<int> kv_positions;  // the key rows, in row order
};

std::vector<int> range(int begin, int end) {
  std::vector<int> values(std::max(0, end - begin));
  std::iota(values.begin(), values.end(), begin);
  return values;
}

// Zigzag shard of a length-L sequence for rank `rank` of a group of c: chunks rank and 2c-1-rank.
std::vector<int> zigzag(int length, int c, int rank) {
  const int chunk = length / (2 * c);
  std::vector<int> rows = range(rank * chunk, (rank + 1) * chunk);
  const std::vector<int> tail = range((2 * c - 1 - rank) * chunk, (2 * c - rank) * chunk);
  rows.insert(rows.end(), tail.begin(), tail.end());
  return rows;
}

// Pass when |got − want| is within tolerance, and −inf exactly where the CPU has −inf.
void expect_lse(const std::string& what, const std::vector<float>& got,
                const std::vector<float>& want) {
  std::vector<float> got_finite, want_finite;
  bool same_inf = true;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool want_inf = std::isinf(want[i]), got_inf = std::isinf(got[i]);
    same_inf = same_inf && want_inf == got_inf;
    if (!want_inf && !got_inf) {
      got_finite.push_back(got[i]);
      want_finite.push_back(want[i]);
    }
  }
  expect(same_inf, what + ": -inf exactly for the queries that see no key");
  expect_close(what, got_finite, want_finite, 1e-3, 1e-3);
}

void check_attention(const std::string& name, const std::vector<Sequence>& seqs, int q_heads,
                     int kv_heads, int d, bool accumulate_dkv) {
  std::vector<std::int32_t> q_cu = {0}, kv_cu = {0}, q_pos, kv_pos;
  int max_q = 0, max_kv = 0;
  for (const Sequence& s : seqs) {
    q_pos.insert(q_pos.end(), s.q_positions.begin(), s.q_positions.end());
    kv_pos.insert(kv_pos.end(), s.kv_positions.begin(), s.kv_positions.end());
    q_cu.push_back(static_cast<int>(q_pos.size()));
    kv_cu.push_back(static_cast<int>(kv_pos.size()));
    max_q = std::max(max_q, static_cast<int>(s.q_positions.size()));
    max_kv = std::max(max_kv, static_cast<int>(s.kv_positions.size()));
  }
  const int tq = static_cast<int>(q_pos.size()), tk = static_cast<int>(kv_pos.size());
  const int num_seqs = static_cast<int>(seqs.size());
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> q = round_to_bf16(random_floats(std::size_t(tq) * q_heads * d, 90, -2, 2));
  std::vector<float> k = round_to_bf16(random_floats(std::size_t(tk) * kv_heads * d, 91, -2, 2));
  std::vector<float> v = round_to_bf16(random_floats(std::size_t(tk) * kv_heads * d, 92));
  std::vector<float> dout = round_to_bf16(random_floats(std::size_t(tq) * q_heads * d, 93));
  std::vector<float> out(q.size()), lse(std::size_t(tq) * q_heads), dq(q.size());
  std::vector<float> dk = random_floats(k.size(), 94), dv = random_floats(v.size(), 95);
  const std::vector<float> dk_start = dk, dv_start = dv;

  core::Arena arena("attention_test");
  ops::OpContext cpu{};
  cpu.scratch = &arena;
  const ops::VarlenAttentionLayout layout{view(q_cu, {num_seqs + 1}), view(kv_cu, {num_seqs + 1}),
                                          view(q_pos, {tq}), view(kv_pos, {tk})};
  ops::AttentionSaved saved{view(lse, {tq, q_heads})};
  const Shape q_shape{tq, q_heads, d}, kv_shape{tk, kv_heads, d};
  ops::attention_forward(cpu, view(q, q_shape), view(k, kv_shape), view(v, kv_shape), layout, scale,
                         view(out, q_shape), saved);
  const ops::GradMode kv_mode =
      accumulate_dkv ? ops::GradMode::accumulate : ops::GradMode::overwrite;
  ops::attention_backward(cpu, view(dout, q_shape), view(q, q_shape), view(k, kv_shape),
                          view(v, kv_shape), view(out, q_shape), saved, layout, scale,
                          view(dq, q_shape), view(dk, kv_shape), view(dv, kv_shape),
                          {ops::GradMode::overwrite, kv_mode, kv_mode});

  DeviceBuffer<std::int32_t> d_q_cu(q_cu), d_kv_cu(kv_cu), d_q_pos(q_pos), d_kv_pos(kv_pos);
  auto d_q = to_device_bf16(q), d_k = to_device_bf16(k), d_v = to_device_bf16(v),
       d_dout = to_device_bf16(dout);
  DeviceBuffer<float> d_out(out.size()), d_lse(lse.size()), d_dq(dq.size()), d_dk(dk_start),
      d_dv(dv_start), d_delta(lse.size());
  kernels::AttentionShape shape;
  shape.q_tokens = tq;
  shape.kv_tokens = tk;
  shape.q_heads = q_heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = d;
  shape.num_seqs = num_seqs;
  shape.max_q_rows = max_q;
  shape.max_kv_rows = max_kv;
  shape.q_cu_seqlens = d_q_cu.get();
  shape.kv_cu_seqlens = d_kv_cu.get();
  shape.q_positions = d_q_pos.get();
  shape.kv_positions = d_kv_pos.get();
  shape.scale = static_cast<float>(scale);
  kernels::attention_forward(shape, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_lse.get(),
                             nullptr);
  d_dq.zero();
  kernels::attention_backward(shape, d_q.get(), d_k.get(), d_v.get(), d_dout.get(), d_out.get(),
                              d_lse.get(), d_dq.get(), d_dk.get(), d_dv.get(), accumulate_dkv,
                              d_delta.get(), nullptr);
  expect_close(name + " out", d_out.download(), out, kBf16AtolRel, kBf16Rtol);
  expect_lse(name + " lse", d_lse.download(), lse);
  // P and dS are rounded to bf16 before their products: a looser bound for the gradients.
  expect_close(name + " dq", d_dq.download(), dq, 2 * kBf16AtolRel, 2.5 * kBf16Rtol);
  expect_close(name + " dk", d_dk.download(), dk, 2 * kBf16AtolRel, 2.5 * kBf16Rtol);
  expect_close(name + " dv", d_dv.download(), dv, 2 * kBf16AtolRel, 2.5 * kBf16Rtol);
}

Sequence whole(int length) {
  return {range(0, length), range(0, length)};
}

GPU_TEST(attention_whole_sequences_gqa4) {
  // Lengths around the 64-row forward and 32-row backward tiles, and an empty sequence.
  check_attention("d=64 Hq=4 Hkv=1",
                  {whole(1), whole(63), whole(0), whole(64), whole(65), whole(130)}, 4, 1, 64,
                  false);
}

GPU_TEST(attention_zigzag_query_subsets) {
  // CP group of 2 and of 4: this rank's zigzag rows against the whole sequence's keys.
  check_attention("zigzag c=2 rank 1, d=128 Hq=8 Hkv=2",
                  {{zigzag(200, 2, 1), range(0, 200)}, {zigzag(72, 2, 1), range(0, 72)}}, 8, 2, 128,
                  false);
  check_attention("zigzag c=4 rank 0, d=128 Hq=4 Hkv=4", {{zigzag(256, 4, 0), range(0, 256)}}, 4, 4,
                  128, true);
}

GPU_TEST(attention_key_blocks_and_order) {
  // A ring step: the keys are one block of the sequence, so some queries see none of them
  // (lse −inf, zero output), and a block of keys given in shuffled order.
  std::vector<int> shuffled = range(0, 90);
  std::reverse(shuffled.begin(), shuffled.end());
  std::rotate(shuffled.begin(), shuffled.begin() + 37, shuffled.end());
  check_attention("key block [40, 80), d=256 Hq=2 Hkv=2",
                  {{range(0, 100), range(40, 80)}, {range(0, 90), shuffled}}, 2, 2, 256, true);
  check_attention("queries with no keys, d=16 Hq=3 Hkv=1",
                  {{range(0, 20), {}}, {range(5, 40), range(0, 3)}, {{}, range(0, 10)}}, 3, 1, 16,
                  false);
}

GPU_TEST(attention_merge_key_blocks) {
  // The ring's fold of one key block into the accumulated result: ordinary rows, rows where the
  // part saw no key (lse -inf: unchanged) and rows where the accumulator saw none yet (copied).
  const std::int64_t rows = 37, d = 24;
  std::vector<float> out_acc = random_floats(rows * d, 11), out_part = random_floats(rows * d, 12);
  std::vector<float> lse_acc = random_floats(rows, 13, -3.0f, 3.0f);
  std::vector<float> lse_part = random_floats(rows, 14, -3.0f, 3.0f);
  for (std::int64_t r = 0; r < rows; r += 5) lse_part[r] = -INFINITY;
  for (std::int64_t r = 2; r < rows; r += 7) lse_acc[r] = -INFINITY;
  DeviceBuffer<float> device_out(out_acc), device_lse(lse_acc), device_part(out_part),
      device_part_lse(lse_part);
  kernels::attention_merge_f32(device_out.get(), device_lse.get(), device_part.get(),
                               device_part_lse.get(), rows, d, nullptr);
  ops::attention_merge({}, view(out_acc, {rows, 1, d}), view(lse_acc, {rows, 1}),
                       view(out_part, {rows, 1, d}), view(lse_part, {rows, 1}));
  expect_close("merged out", device_out.download(), out_acc, kF32AtolRel, kF32Rtol);
  expect_lse("merged lse", device_lse.download(), lse_acc);
}

}  // namespace
}  // namespace dyncp::gpu_test
