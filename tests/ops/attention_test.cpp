// Varlen causal GQA attention: tiled == reference, CP shards and K/V blocks == the full
// computation, GQA head mapping, and finite differences for the backward.

#include "ops/attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "op_test_utils.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

// A bin of whole sequences: queries and keys are the same rows, positions 0..L-1.
struct Bin {
  std::vector<std::int32_t> cu{0};
  std::vector<std::int32_t> positions;
  explicit Bin(const std::vector<std::int32_t>& lengths) {
    for (std::int32_t length : lengths) {
      cu.push_back(cu.back() + length);
      for (std::int32_t p = 0; p < length; ++p) positions.push_back(p);
    }
  }
  std::int64_t tokens() const { return cu.back(); }
  VarlenAttentionLayout layout() const {
    return {int_tensor(cu), int_tensor(cu), int_tensor(positions), int_tensor(positions)};
  }
};

struct Qkv {
  Tensor q, k, v;
};

Qkv random_qkv(std::int64_t q_tokens, std::int64_t kv_tokens, std::int64_t q_heads,
               std::int64_t kv_heads, std::int64_t head_dim, DType dtype, std::uint64_t seed) {
  return {random_tensor(Shape{q_tokens, q_heads, head_dim}, dtype, seed),
          random_tensor(Shape{kv_tokens, kv_heads, head_dim}, dtype, seed + 1),
          random_tensor(Shape{kv_tokens, kv_heads, head_dim}, dtype, seed + 2)};
}

// Rows `rows` of a [T, ...] tensor, gathered into a new tensor.
Tensor gather_rows(const Tensor& t, const std::vector<std::int32_t>& rows) {
  Shape shape = t.shape();
  shape[0] = static_cast<std::int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  for (std::size_t i = 0; i < rows.size(); ++i)
    out.select(static_cast<std::int64_t>(i)).copy_from(t.select(rows[i]));
  return out;
}

}  // namespace

TEST_CASE("tiled attention equals the reference at awkward sizes", "[ops][attention]") {
  const OpContext ctx;
  const auto lengths =
      GENERATE(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{67},
               std::vector<std::int32_t>{5, 0, 130, 1}, std::vector<std::int32_t>{64, 65, 0});
  const auto heads =
      GENERATE(std::pair<int, int>{4, 2}, std::pair<int, int>{3, 1}, std::pair<int, int>{2, 2});
  const std::int64_t head_dim = GENERATE(5, 24);
  const DType dtype = GENERATE(DType::f64, DType::f32);
  const Bin bin(lengths);
  const Qkv x =
      random_qkv(bin.tokens(), bin.tokens(), heads.first, heads.second, head_dim, dtype, 10);
  const Tensor out = Tensor::empty(x.q.shape(), dtype);
  AttentionSaved saved{Tensor::empty(Shape{bin.tokens(), heads.first}, dtype)};
  const Tensor ref_out = Tensor::empty(x.q.shape(), dtype);
  const Tensor ref_lse = Tensor::empty(saved.lse.shape(), dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  attention_forward(ctx, x.q, x.k, x.v, bin.layout(), scale, out, saved);
  attention_forward_reference(ctx, x.q, x.k, x.v, bin.layout(), scale, ref_out, ref_lse);
  const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
  require_close(out, ref_out, tol, tol, "out");
  require_close(saved.lse, ref_lse, tol, tol, "lse");
}

TEST_CASE("GQA uses kv head hq / (Hq / Hkv)", "[ops][attention]") {
  const OpContext ctx;
  const Bin bin({9, 4});
  const std::int64_t q_heads = 6, kv_heads = 2, d = 4, t = bin.tokens();
  const Qkv x = random_qkv(t, t, q_heads, kv_heads, d, DType::f64, 20);
  // Expand K/V to one head per query head (repeat_interleave) and run plain MHA.
  const Tensor k_full = Tensor::empty(Shape{t, q_heads, d}, DType::f64);
  const Tensor v_full = Tensor::empty(Shape{t, q_heads, d}, DType::f64);
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t h = 0; h < q_heads; ++h) {
      k_full.select(i).select(h).copy_from(x.k.select(i).select(h / 3));
      v_full.select(i).select(h).copy_from(x.v.select(i).select(h / 3));
    }
  }
  const Tensor out = Tensor::empty(x.q.shape(), DType::f64),
               out_mha = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved saved{Tensor::empty(Shape{t, q_heads}, DType::f64)};
  AttentionSaved saved_mha{Tensor::empty(Shape{t, q_heads}, DType::f64)};
  attention_forward(ctx, x.q, x.k, x.v, bin.layout(), 0.5, out, saved);
  attention_forward(ctx, x.q, k_full, v_full, bin.layout(), 0.5, out_mha, saved_mha);
  require_close(out, out_mha, 1e-13, 1e-13, "out");
}

TEST_CASE("zigzag query shards equal the same rows of the full computation",
          "[ops][attention][cp]") {
  const OpContext ctx;
  const int group_size = GENERATE(2, 4);
  // Two sequences whose lengths are multiples of 2c, one of them longer than a tile.
  const std::vector<std::int32_t> lengths{2 * group_size * 3, 2 * group_size * 20};
  const Bin bin(lengths);
  const std::int64_t hq = 4, hkv = 2, d = 8, t = bin.tokens();
  const Qkv x = random_qkv(t, t, hq, hkv, d, DType::f64, 30);
  const Tensor full_out = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved full_saved{Tensor::empty(Shape{t, hq}, DType::f64)};
  attention_forward(ctx, x.q, x.k, x.v, bin.layout(), 0.3, full_out, full_saved);

  for (int rank = 0; rank < group_size; ++rank) {
    // Rank k keeps chunks k and 2c−1−k of every sequence (keys: the whole sequence).
    std::vector<std::int32_t> rows, positions, q_cu{0};
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const std::int32_t chunk = lengths[s] / (2 * group_size);
      for (int c : {rank, 2 * group_size - 1 - rank}) {
        for (std::int32_t p = c * chunk; p < (c + 1) * chunk; ++p) {
          rows.push_back(bin.cu[s] + p);
          positions.push_back(p);
        }
      }
      q_cu.push_back(static_cast<std::int32_t>(rows.size()));
    }
    const VarlenAttentionLayout layout{int_tensor(q_cu), int_tensor(bin.cu), int_tensor(positions),
                                       int_tensor(bin.positions)};
    const Tensor q_local = gather_rows(x.q, rows);
    const Tensor out = Tensor::empty(q_local.shape(), DType::f64);
    AttentionSaved saved{Tensor::empty(Shape{q_local.size(0), hq}, DType::f64)};
    attention_forward(ctx, q_local, x.k, x.v, layout, 0.3, out, saved);
    require_close(out, gather_rows(full_out, rows), 1e-12, 1e-12, "shard out");
    require_close(saved.lse, gather_rows(full_saved.lse, rows), 1e-12, 1e-12, "shard lse");

    // Backward of the shard: dq rows equal the full dq rows when only these rows carry dout.
    const Tensor dout_local =
        random_tensor(out.shape(), DType::f64, 40 + static_cast<std::uint64_t>(rank));
    const Tensor dq = Tensor::empty(q_local.shape(), DType::f64);
    const Tensor dk = Tensor::empty(x.k.shape(), DType::f64),
                 dv = Tensor::empty(x.v.shape(), DType::f64);
    dyncp::core::Arena scratch("attention-test", 1 << 16);
    OpContext with_scratch;
    with_scratch.scratch = &scratch;
    attention_backward(with_scratch, dout_local, q_local, x.k, x.v, out, saved, layout, 0.3, dq, dk,
                       dv);
    const Tensor dout_full = Tensor::zeros(x.q.shape(), DType::f64);
    for (std::size_t i = 0; i < rows.size(); ++i)
      dout_full.select(rows[i]).copy_from(dout_local.select(static_cast<std::int64_t>(i)));
    const Tensor dq_full = Tensor::empty(x.q.shape(), DType::f64);
    const Tensor dk_full = Tensor::empty(x.k.shape(), DType::f64),
                 dv_full = Tensor::empty(x.v.shape(), DType::f64);
    attention_backward(with_scratch, dout_full, x.q, x.k, x.v, full_out, full_saved, bin.layout(),
                       0.3, dq_full, dk_full, dv_full);
    require_close(dq, gather_rows(dq_full, rows), 1e-11, 1e-12, "shard dq");
    require_close(dk, dk_full, 1e-11, 1e-12, "shard dk");
    require_close(dv, dv_full, 1e-11, 1e-12, "shard dv");
  }
}

TEST_CASE("K/V split in two blocks and merged by LSE equals the full attention",
          "[ops][attention][cp]") {
  const OpContext ctx;
  dyncp::core::Arena scratch("attention-test", 1 << 16);
  OpContext with_scratch;
  with_scratch.scratch = &scratch;
  const std::vector<std::int32_t> lengths{7, 0, 100, 1};
  const std::int32_t split = GENERATE(0, 3, 50);  // keys with position < split go to block A
  const Bin bin(lengths);
  const std::int64_t hq = 2, hkv = 1, d = 6, t = bin.tokens();
  const Qkv x = random_qkv(t, t, hq, hkv, d, DType::f64, 50);
  const Tensor full_out = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved full_saved{Tensor::empty(Shape{t, hq}, DType::f64)};
  attention_forward(ctx, x.q, x.k, x.v, bin.layout(), 0.4, full_out, full_saved);

  // Block B lists its keys in reverse order: key order must not matter.
  std::vector<std::int32_t> rows_a, rows_b, cu_a{0}, cu_b{0}, pos_a, pos_b;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    for (std::int32_t p = 0; p < lengths[s]; ++p) {
      if (p < split) {
        rows_a.push_back(bin.cu[s] + p);
        pos_a.push_back(p);
      }
    }
    for (std::int32_t p = lengths[s] - 1; p >= 0; --p) {
      if (p >= split) {
        rows_b.push_back(bin.cu[s] + p);
        pos_b.push_back(p);
      }
    }
    cu_a.push_back(static_cast<std::int32_t>(rows_a.size()));
    cu_b.push_back(static_cast<std::int32_t>(rows_b.size()));
  }
  const VarlenAttentionLayout layout_a{int_tensor(bin.cu), int_tensor(cu_a),
                                       int_tensor(bin.positions), int_tensor(pos_a)};
  const VarlenAttentionLayout layout_b{int_tensor(bin.cu), int_tensor(cu_b),
                                       int_tensor(bin.positions), int_tensor(pos_b)};
  const Tensor ka = gather_rows(x.k, rows_a), va = gather_rows(x.v, rows_a);
  const Tensor kb = gather_rows(x.k, rows_b), vb = gather_rows(x.v, rows_b);
  const Tensor out = Tensor::empty(x.q.shape(), DType::f64),
               out_b = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved saved{Tensor::empty(Shape{t, hq}, DType::f64)},
      saved_b{Tensor::empty(Shape{t, hq}, DType::f64)};
  attention_forward(ctx, x.q, ka, va, layout_a, 0.4, out, saved);
  attention_forward(ctx, x.q, kb, vb, layout_b, 0.4, out_b, saved_b);
  attention_merge(ctx, out, saved.lse, out_b, saved_b.lse);
  require_close(out, full_out, 1e-12, 1e-12, "merged out");
  require_close(saved.lse, full_saved.lse, 1e-12, 1e-12, "merged lse");

  // Backward per block with the final out / lse: dk, dv exact per block, dq summed.
  const Tensor dout = random_tensor(x.q.shape(), DType::f64, 60);
  const Tensor dq_full = Tensor::empty(x.q.shape(), DType::f64);
  const Tensor dk_full = Tensor::empty(x.k.shape(), DType::f64),
               dv_full = Tensor::empty(x.v.shape(), DType::f64);
  attention_backward(with_scratch, dout, x.q, x.k, x.v, full_out, full_saved, bin.layout(), 0.4,
                     dq_full, dk_full, dv_full);
  const Tensor dq = Tensor::empty(x.q.shape(), DType::f64);
  const Tensor dka = Tensor::empty(ka.shape(), DType::f64),
               dva = Tensor::empty(va.shape(), DType::f64);
  const Tensor dkb = Tensor::empty(kb.shape(), DType::f64),
               dvb = Tensor::empty(vb.shape(), DType::f64);
  attention_backward(with_scratch, dout, x.q, ka, va, out, saved, layout_a, 0.4, dq, dka, dva);
  AttentionGradModes accumulate_dq;
  accumulate_dq.dq = GradMode::accumulate;
  attention_backward(with_scratch, dout, x.q, kb, vb, out, saved, layout_b, 0.4, dq, dkb, dvb,
                     accumulate_dq);
  require_close(dq, dq_full, 1e-11, 1e-12, "dq");
  require_close(dka, gather_rows(dk_full, rows_a), 1e-11, 1e-12, "dk block a");
  require_close(dvb, gather_rows(dv_full, rows_b), 1e-11, 1e-12, "dv block b");
}

TEST_CASE("a query that sees no key gets lse -inf and a zero output", "[ops][attention]") {
  const OpContext ctx;
  // Query at position 1, keys at positions 2 and 3 only.
  const VarlenAttentionLayout layout{int_tensor({0, 1}), int_tensor({0, 2}), int_tensor({1}),
                                     int_tensor({2, 3})};
  const Qkv x = random_qkv(1, 2, 1, 1, 3, DType::f64, 70);
  const Tensor out = random_tensor(x.q.shape(), DType::f64, 71);
  AttentionSaved saved{Tensor::empty(Shape{1, 1}, DType::f64)};
  attention_forward(ctx, x.q, x.k, x.v, layout, 1.0, out, saved);
  CHECK(std::isinf(element(saved.lse, 0)));
  CHECK(element(saved.lse, 0) < 0);
  for (int i = 0; i < 3; ++i) CHECK(element(out, i) == 0.0);
}

TEST_CASE("attention backward matches finite differences", "[ops][attention][fd]") {
  dyncp::core::Arena scratch("attention-fd", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const auto lengths =
      GENERATE(std::vector<std::int32_t>{3, 0, 5}, std::vector<std::int32_t>{70, 1});
  const Bin bin(lengths);
  const std::int64_t hq = 2, hkv = 1, d = 3, t = bin.tokens();
  const Qkv x = random_qkv(t, t, hq, hkv, d, DType::f64, 80);
  const Tensor out = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved saved{Tensor::empty(Shape{t, hq}, DType::f64)};
  const Tensor dout = random_tensor(x.q.shape(), DType::f64, 81);
  const double scale = 0.7;
  const VarlenAttentionLayout layout = bin.layout();
  attention_forward(ctx, x.q, x.k, x.v, layout, scale, out, saved);
  const Tensor dq = Tensor::empty(x.q.shape(), DType::f64);
  const Tensor dk = Tensor::empty(x.k.shape(), DType::f64),
               dv = Tensor::empty(x.v.shape(), DType::f64);
  attention_backward(ctx, dout, x.q, x.k, x.v, out, saved, layout, scale, dq, dk, dv);
  const Tensor probe = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved probe_saved{Tensor::empty(Shape{t, hq}, DType::f64)};
  auto loss = [&] {
    attention_forward(ctx, x.q, x.k, x.v, layout, scale, probe, probe_saved);
    return dot(probe, dout);
  };
  const std::int64_t stride = t > 20 ? 7 : 1;  // sample the large case
  CHECK(finite_difference_error(x.q, dq, loss, 1e-5, stride) < kFdTolerance);
  CHECK(finite_difference_error(x.k, dk, loss, 1e-5, stride) < kFdTolerance);
  CHECK(finite_difference_error(x.v, dv, loss, 1e-5, stride) < kFdTolerance);
  CHECK(scratch.bytes_in_use() == 0);  // scratch handed back
}

TEST_CASE("attention rejects inconsistent layouts naming the op", "[ops][attention]") {
  const OpContext ctx;
  const Qkv x = random_qkv(4, 4, 2, 1, 3, DType::f32, 90);
  const Tensor out = Tensor::empty(x.q.shape(), DType::f32);
  AttentionSaved saved{Tensor::empty(Shape{4, 2}, DType::f32)};
  const VarlenAttentionLayout bad_end{int_tensor({0, 3}), int_tensor({0, 4}),
                                      int_tensor({0, 1, 2, 3}), int_tensor({0, 1, 2, 3})};
  CHECK_THROWS_WITH(attention_forward(ctx, x.q, x.k, x.v, bad_end, 1.0, out, saved),
                    Catch::Contains("attention_forward") && Catch::Contains("q_cu_seqlens"));
  const VarlenAttentionLayout decreasing{int_tensor({0, 3, 2, 4}), int_tensor({0, 1, 2, 4}),
                                         int_tensor({0, 1, 2, 3}), int_tensor({0, 1, 2, 3})};
  CHECK_THROWS_WITH(attention_forward(ctx, x.q, x.k, x.v, decreasing, 1.0, out, saved),
                    Catch::Contains("non-decreasing"));
  const Tensor k_bad = random_tensor(Shape{4, 3, 3}, DType::f32, 91);
  CHECK_THROWS_WITH(attention_forward(ctx, x.q, k_bad, k_bad, bad_end, 1.0, out, saved),
                    Catch::Contains("multiple of kv heads"));
}

TEST_CASE("f32 attention backward agrees with the f64 computation", "[ops][attention]") {
  dyncp::core::Arena scratch("attention-f32", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const Bin bin({67, 0, 130});
  const std::int64_t hq = 4, hkv = 2, d = 24, t = bin.tokens();
  const Qkv x64 = random_qkv(t, t, hq, hkv, d, DType::f64, 100);
  const Tensor dout64 = random_tensor(x64.q.shape(), DType::f64, 103);
  auto to_f32 = [](const Tensor& src) {
    Tensor dst = Tensor::empty(src.shape(), DType::f32);
    for (std::int64_t i = 0; i < src.numel(); ++i) set_element(dst, i, element(src, i));
    for (std::int64_t i = 0; i < src.numel(); ++i)
      set_element(src, i, element(dst, i));  // same inputs
    return dst;
  };
  const Tensor q = to_f32(x64.q), k = to_f32(x64.k), v = to_f32(x64.v), dout = to_f32(dout64);
  const double scale = 1.0 / std::sqrt(24.0);
  const VarlenAttentionLayout layout = bin.layout();
  auto run = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, const Tensor& dd,
                 DType dtype) {
    const Tensor out = Tensor::empty(qq.shape(), dtype);
    AttentionSaved saved{Tensor::empty(Shape{t, hq}, dtype)};
    attention_forward(ctx, qq, kk, vv, layout, scale, out, saved);
    std::vector<Tensor> grads{Tensor::empty(qq.shape(), dtype), Tensor::empty(kk.shape(), dtype),
                              Tensor::empty(vv.shape(), dtype)};
    attention_backward(ctx, dd, qq, kk, vv, out, saved, layout, scale, grads[0], grads[1],
                       grads[2]);
    grads.push_back(out);
    return grads;
  };
  const auto g32 = run(q, k, v, dout, DType::f32);
  const auto g64 = run(x64.q, x64.k, x64.v, dout64, DType::f64);
  const char* names[] = {"dq", "dk", "dv", "out"};
  for (std::size_t i = 0; i < 4; ++i) {
    INFO(names[i]);
    CHECK(relative_error(g32[i], g64[i]) < 1e-5);
  }
}

TEST_CASE("a sliding window hides keys w or more positions back: tiled == reference, FD",
          "[ops][attention][window]") {
  dyncp::core::Arena scratch("attention-window", 1 << 20);
  OpContext ctx;
  ctx.scratch = &scratch;
  // 200 tokens span four key tiles: windows inside one tile, across two, and past the sequence.
  const std::int32_t window = GENERATE(1, 8, 70, 500);
  const Bin bin({200, 9});
  const std::int64_t hq = 2, hkv = 1, d = 4, t = bin.tokens();
  const Qkv x = random_qkv(t, t, hq, hkv, d, DType::f64, 90);
  VarlenAttentionLayout layout = bin.layout();
  layout.sliding_window = window;
  const Tensor out = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved saved{Tensor::empty(Shape{t, hq}, DType::f64)};
  attention_forward(ctx, x.q, x.k, x.v, layout, 0.5, out, saved);
  // The reference, written out here: softmax over keys p - w < k <= p of the same sequence.
  for (std::int64_t s = 0; s + 1 < static_cast<std::int64_t>(bin.cu.size()); ++s) {
    for (std::int64_t i = bin.cu[s]; i < bin.cu[s + 1]; i += 13) {
      for (std::int64_t h = 0; h < hq; ++h) {
        std::vector<double> scores, weights;
        double max_score = -1e300;
        for (std::int64_t j = bin.cu[s]; j <= i; ++j) {
          if (i - j >= window) continue;
          double dot_qk = 0;
          for (std::int64_t c = 0; c < d; ++c)
            dot_qk += x.q.data<double>()[(i * hq + h) * d + c] * x.k.data<double>()[j * d + c];
          scores.push_back(0.5 * dot_qk);
          max_score = std::max(max_score, 0.5 * dot_qk);
        }
        double sum = 0;
        for (double score : scores) sum += std::exp(score - max_score);
        INFO("query " << i << " head " << h << " window " << window);
        CHECK(saved.lse.data<double>()[i * hq + h] ==
              Approx(max_score + std::log(sum)).epsilon(1e-12));
      }
    }
  }
  // Tiled == reference op with the window.
  const Tensor ref_out = Tensor::empty(x.q.shape(), DType::f64);
  const Tensor ref_lse = Tensor::empty(saved.lse.shape(), DType::f64);
  attention_forward_reference(ctx, x.q, x.k, x.v, layout, 0.5, ref_out, ref_lse);
  require_close(out, ref_out, 1e-12, 1e-12, "out");
  // Backward against finite differences of the windowed forward.
  const Tensor dout = random_tensor(x.q.shape(), DType::f64, 91);
  const Tensor dq = Tensor::empty(x.q.shape(), DType::f64);
  const Tensor dk = Tensor::empty(x.k.shape(), DType::f64),
               dv = Tensor::empty(x.v.shape(), DType::f64);
  attention_backward(ctx, dout, x.q, x.k, x.v, out, saved, layout, 0.5, dq, dk, dv);
  const Tensor probe = Tensor::empty(x.q.shape(), DType::f64);
  AttentionSaved probe_saved{Tensor::empty(Shape{t, hq}, DType::f64)};
  auto loss = [&] {
    attention_forward(ctx, x.q, x.k, x.v, layout, 0.5, probe, probe_saved);
    return dot(probe, dout);
  };
  if (window == 1) {
    // Each query sees only itself: out = v, so q and k get no gradient (round-off only).
    CHECK(dot(dq, dq) < 1e-24);
    CHECK(dot(dk, dk) < 1e-24);
  } else {
    CHECK(finite_difference_error(x.q, dq, loss, 1e-5, 37) < kFdTolerance);
    CHECK(finite_difference_error(x.k, dk, loss, 1e-5, 37) < kFdTolerance);
  }
  CHECK(finite_difference_error(x.v, dv, loss, 1e-5, 37) < kFdTolerance);
}
