// Flash attention (forward and backward) against the CPU op on the same bf16-rounded q, k, v
// and dout. The cases cover every tile path: sequence lengths off the 64 / 32 tile sizes,
// empty sequences and queries that see no key, GQA ratios 1 to 16, head dims 16 to 256,
// zigzag query subsets (a CP rank's rows), a key block holding part of the sequence, keys in
// shuffled order, and tiles skipped because all their keys are in the future; the same with a
// sliding window (tiles skipped behind it), for the bf16 and the fp32 kernels.
#include "attention.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <string>

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

// Both device kernels (bf16 tensor-core and fp32) against the CPU op; window > 0 is the
// sliding window of lib/ops/attention.hpp.
void check_attention(const std::string& name, const std::vector<Sequence>& seqs, int q_heads,
                     int kv_heads, int d, bool accumulate_dkv, int window = 0) {
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
                                          view(q_pos, {tq}), view(kv_pos, {tk}), window};
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
  shape.sliding_window = window;
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

  // The fp32 kernels on the same (bf16-representable) values: fp32 round-off only. Their dK /
  // dV always accumulate, so overwrite starts from zero.
  DeviceBuffer<float> f_q(q), f_k(k), f_v(v), f_dout(dout), f_out(out.size()), f_lse(lse.size()),
      f_dq(dq.size()), f_dk(accumulate_dkv ? dk_start : std::vector<float>(dk.size(), 0.0f)),
      f_dv(accumulate_dkv ? dv_start : std::vector<float>(dv.size(), 0.0f));
  kernels::attention_forward_f32(shape, f_q.get(), f_k.get(), f_v.get(), f_out.get(), f_lse.get(),
                                 nullptr);
  kernels::attention_backward_f32(shape, f_q.get(), f_k.get(), f_v.get(), f_dout.get(), f_out.get(),
                                  f_lse.get(), f_dq.get(), false, f_dk.get(), f_dv.get(), nullptr);
  expect_close(name + " fp32 out", f_out.download(), out, kF32AtolRel, kF32Rtol);
  expect_lse(name + " fp32 lse", f_lse.download(), lse);
  expect_close(name + " fp32 dq", f_dq.download(), dq, kF32AtolRel, kF32Rtol);
  expect_close(name + " fp32 dk", f_dk.download(), dk, kF32AtolRel, kF32Rtol);
  expect_close(name + " fp32 dv", f_dv.download(), dv, kF32AtolRel, kF32Rtol);
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

GPU_TEST(attention_gqa_ratios_8_and_16) {
  // The forward packs a kv head's query heads into one block's 64 slots (8 rows x 8 heads, 4
  // rows x 16 heads): row counts off the packed tile, zigzag rows, a window, two kv heads.
  check_attention("GQA 8: d=64 Hq=16 Hkv=2", {whole(1), whole(7), whole(9), whole(0), whole(70)},
                  16, 2, 64, false);
  check_attention("GQA 16: d=32 Hq=16 Hkv=1", {whole(3), whole(4), whole(5), whole(67)}, 16, 1, 32,
                  true);
  check_attention("GQA 16, zigzag c=2 rank 0, window 9: d=16 Hq=32 Hkv=2",
                  {{zigzag(40, 2, 0), range(0, 40)}, {zigzag(12, 2, 0), range(0, 12)}}, 32, 2, 16,
                  false, 9);
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

GPU_TEST(attention_sliding_window) {
  // Packed sequences around the tile sizes against windows smaller than most of them (tiles
  // skipped behind the window, tiles cut by it), equal to one (65) and larger than all; window
  // 2 leaves each query its own key and the one before (window 1 would make dQ and dK exactly
  // zero: a softmax over one key has no gradient, so only round-off would be compared).
  const std::vector<Sequence> packed = {whole(1),  whole(63), whole(0),
                                        whole(64), whole(65), whole(130)};
  for (const int window : {2, 16, 65, 1000, INT_MAX})
    check_attention("window " + std::to_string(window) + ", d=64 Hq=4 Hkv=2", packed, 4, 2, 64,
                    window == 16, window);
  // A CP rank's zigzag rows against the whole sequence (the middle chunks out of reach of both
  // of its chunks), and ring blocks: keys [40, 80) of 100 queries (queries before 40 and from
  // 89 on see none of them: lse -inf), the same block shuffled, a block entirely behind the
  // window of every query.
  check_attention("window 20, zigzag c=4 rank 0, d=32 Hq=2 Hkv=1",
                  {{zigzag(256, 4, 0), range(0, 256)}, {zigzag(72, 4, 3), range(0, 72)}}, 2, 1, 32,
                  true, 20);
  std::vector<int> shuffled = range(40, 80);
  std::rotate(shuffled.begin(), shuffled.begin() + 13, shuffled.end());
  std::reverse(shuffled.begin(), shuffled.begin() + 20);
  check_attention(
      "window 10, key blocks, d=16 Hq=3 Hkv=1",
      {{range(0, 100), range(40, 80)}, {range(0, 100), shuffled}, {range(100, 164), range(0, 40)}},
      3, 1, 16, true, 10);
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
