// bf16 products (OpContext::precision = bf16) on CPU: every product and attention computes
// exactly what fp32 computes on the bf16-rounded operands, weight gradients accumulate into the
// fp32 gradient, and the rounding really happens (the result differs from plain fp32).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/dtype.hpp"
#include "op_test_utils.hpp"
#include "ops/attention.hpp"
#include "ops/bf16_operands.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/gemm.hpp"

using namespace dyncp;
using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

Tensor rounded(const Tensor& t) {
  Tensor copy = clone(t);
  detail::round_to_bf16(copy.data<float>(), copy.numel());
  return copy;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

struct Contexts {
  core::Arena scratch{"test.scratch", std::size_t{1} << 20};
  OpContext fp32, bf16;
  Contexts() {
    fp32.scratch = &scratch;
    bf16.scratch = &scratch;
    bf16.precision = ComputePrecision::bf16;
  }
};

}  // namespace

TEST_CASE("bf16 rounding is round-to-nearest-even on the 8-bit significand", "[ops][bf16]") {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even significand (1).
  float values[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-9f, -2.5f};
  detail::round_to_bf16(values, 4);
  CHECK(values[0] == 1.0f);
  CHECK(values[1] == 1.0f + 0x1p-6f);  // halfway, rounds up to the even neighbour
  CHECK(values[2] == 1.0f);
  CHECK(values[3] == -2.5f);  // exact in bf16
}

TEST_CASE("bf16 linear forward and backward equal fp32 on bf16-rounded operands",
          "[ops][bf16][gemm]") {
  Contexts c;
  const std::int64_t rows = 7, in = 33, out = 5;
  const Tensor x = random_tensor(Shape{rows, in}, DType::f32, 1);
  const Tensor w = random_tensor(Shape{out, in}, DType::f32, 2);
  const Tensor dy = random_tensor(Shape{rows, out}, DType::f32, 3);
  const Tensor dw_start = random_tensor(Shape{out, in}, DType::f32, 4);  // earlier microbatches

  const Tensor y = Tensor::empty(Shape{rows, out}, DType::f32);
  const Tensor y_want = Tensor::empty(Shape{rows, out}, DType::f32);
  const Tensor y_fp32 = Tensor::empty(Shape{rows, out}, DType::f32);
  linear_forward(c.bf16, x, w, y);
  linear_forward(c.fp32, rounded(x), rounded(w), y_want);
  linear_forward(c.fp32, x, w, y_fp32);
  CHECK(bitwise_equal(y, y_want));
  CHECK_FALSE(bitwise_equal(y, y_fp32));

  const Tensor dx = Tensor::empty(Shape{rows, in}, DType::f32), dx_want = clone(dx);
  const Tensor dw = clone(dw_start), dw_want = clone(dw_start);
  linear_backward(c.bf16, dy, x, w, dx, dw);
  linear_backward(c.fp32, rounded(dy), rounded(x), rounded(w), dx_want, dw_want);
  CHECK(bitwise_equal(dx, dx_want));
  // The weight gradient accumulates in fp32 onto what was there (main_grad), unrounded.
  CHECK(bitwise_equal(dw, dw_want));
  CHECK_FALSE(bitwise_equal(dw, rounded(dw)));
  CHECK(c.scratch.bytes_in_use() == 0);  // the rounded copies are given back
}

TEST_CASE("bf16 gemm and grouped linear equal fp32 on bf16-rounded operands", "[ops][bf16][gemm]") {
  Contexts c;
  const Tensor a = random_tensor(Shape{9, 17}, DType::f32, 5);
  const Tensor b = random_tensor(Shape{6, 17}, DType::f32, 6);
  const Tensor acc = random_tensor(Shape{9, 6}, DType::f32, 7);
  const Tensor got = clone(acc), want = clone(acc);
  gemm(c.bf16, a, Transpose::no, b, Transpose::yes, got, 0.5, /*accumulate=*/true);
  gemm(c.fp32, rounded(a), Transpose::no, rounded(b), Transpose::yes, want, 0.5, true);
  CHECK(bitwise_equal(got, want));

  const std::int64_t experts = 3, in = 19, out = 4, rows = 10;
  const Tensor x = random_tensor(Shape{rows, in}, DType::f32, 8);
  const Tensor w = random_tensor(Shape{experts, out, in}, DType::f32, 9);
  const Tensor dy = random_tensor(Shape{rows, out}, DType::f32, 10);
  Tensor offsets = Tensor::empty(Shape{experts + 1}, DType::i64);
  const std::int64_t bounds[] = {0, 4, 4, rows};  // an empty group
  std::memcpy(offsets.raw_data(), bounds, sizeof bounds);
  const Tensor y = Tensor::empty(Shape{rows, out}, DType::f32), y_want = clone(y);
  grouped_linear_forward(c.bf16, x, w, offsets, y);
  grouped_linear_forward(c.fp32, rounded(x), rounded(w), offsets, y_want);
  CHECK(bitwise_equal(y, y_want));
  const Tensor dx = Tensor::zeros(Shape{rows, in}, DType::f32), dx_want = clone(dx);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f32), dw_want = clone(dw);
  grouped_linear_backward(c.bf16, dy, x, w, offsets, dx, dw);
  grouped_linear_backward(c.fp32, rounded(dy), rounded(x), rounded(w), offsets, dx_want, dw_want);
  CHECK(bitwise_equal(dx, dx_want));
  CHECK(bitwise_equal(dw, dw_want));
}

TEST_CASE("bf16 attention equals fp32 attention on bf16-rounded q, k, v and dout",
          "[ops][bf16][attention]") {
  Contexts c;
  const std::int64_t tokens = 11, q_heads = 4, kv_heads = 2, d = 8;
  const Tensor cu = int_tensor({0, 5, 11});
  const Tensor positions = int_tensor({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5});
  const VarlenAttentionLayout layout{cu, cu, positions, positions};
  const Tensor q = random_tensor(Shape{tokens, q_heads, d}, DType::f32, 11);
  const Tensor k = random_tensor(Shape{tokens, kv_heads, d}, DType::f32, 12);
  const Tensor v = random_tensor(Shape{tokens, kv_heads, d}, DType::f32, 13);
  const Tensor dout = random_tensor(Shape{tokens, q_heads, d}, DType::f32, 14);
  const auto run = [&](const OpContext& ctx, const Tensor& qq, const Tensor& kk, const Tensor& vv,
                       const Tensor& dd) {
    std::vector<Tensor> result;
    const Tensor out = Tensor::empty(q.shape(), DType::f32);
    AttentionSaved saved{Tensor::empty(Shape{tokens, q_heads}, DType::f32)};
    attention_forward(ctx, qq, kk, vv, layout, 0.35, out, saved);
    const Tensor dq = Tensor::empty(q.shape(), DType::f32);
    const Tensor dk = Tensor::empty(k.shape(), DType::f32),
                 dv = Tensor::empty(v.shape(), DType::f32);
    attention_backward(ctx, dd, qq, kk, vv, out, saved, layout, 0.35, dq, dk, dv);
    return std::vector<Tensor>{out, saved.lse, dq, dk, dv};
  };
  const auto got = run(c.bf16, q, k, v, dout);
  const auto want = run(c.fp32, rounded(q), rounded(k), rounded(v), rounded(dout));
  const auto fp32 = run(c.fp32, q, k, v, dout);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i << " (out, lse, dq, dk, dv)");
    CHECK(bitwise_equal(got[i], want[i]));
    CHECK_FALSE(bitwise_equal(got[i], fp32[i]));
  }
}

TEST_CASE("bf16 cross-entropy: fp32 loss on bf16 operands, dlogits rounded before backward",
          "[ops][bf16][cross_entropy]") {
  Contexts c;
  const std::int64_t tokens = 6, hidden = 12, vocab = 23;
  const Tensor h = random_tensor(Shape{tokens, hidden}, DType::f32, 15);
  const Tensor w = random_tensor(Shape{vocab, hidden}, DType::f32, 16);
  const Tensor labels = int_tensor({3, -1, 22, 0, 7, 7});
  const auto run = [&](const OpContext& ctx, const Tensor& hh, const Tensor& ww) {
    const Tensor loss = Tensor::empty(Shape{tokens}, DType::f32);
    const Tensor dh = Tensor::empty(h.shape(), DType::f32);
    const Tensor dw = Tensor::zeros(w.shape(), DType::f32);
    const CrossEntropyResult r = fused_cross_entropy(ctx, hh, ww, labels, Tensor(), loss, dh, dw);
    return std::make_tuple(r.loss_sum, loss, dh, dw);
  };
  const auto [got_sum, got_loss, got_dh, got_dw] = run(c.bf16, h, w);
  const auto [want_sum, want_loss, want_dh, want_dw] = run(c.fp32, rounded(h), rounded(w));
  const auto [fp32_sum, fp32_loss, fp32_dh, fp32_dw] = run(c.fp32, h, w);
  // The forward is exactly fp32 on the rounded operands.
  CHECK(got_sum == want_sum);
  CHECK(bitwise_equal(got_loss, want_loss));
  CHECK(got_sum != fp32_sum);
  // The backward products read dlogits rounded to bf16: a relative change of at most 2^-8 per
  // dlogit. A row's |dlogits| sum to at most 2, so dhidden moves by at most 2^-8 · 2 · max|W|,
  // and dW (a sum over the tokens) by at most 2^-8 · 2 · tokens · max|h|.
  const auto max_abs = [](const Tensor& t) {
    double most = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) most = std::max(most, std::abs(element(t, i)));
    return most;
  };
  CHECK_FALSE(bitwise_equal(got_dh, want_dh));
  require_close(got_dh, want_dh, 0.0, 0x1p-8 * 2 * max_abs(w), "dhidden");
  require_close(got_dw, want_dw, 0.0, 0x1p-8 * 2 * tokens * max_abs(h), "dlm_weight");
}

TEST_CASE("bf16 products refuse f64 operands naming the op", "[ops][bf16]") {
  Contexts c;
  const Tensor x = Tensor::zeros(Shape{2, 3}, DType::f64);
  const Tensor w = Tensor::zeros(Shape{4, 3}, DType::f64);
  const Tensor y = Tensor::zeros(Shape{2, 4}, DType::f64);
  CHECK_THROWS_WITH(linear_forward(c.bf16, x, w, y),
                    Catch::Contains("linear_forward") && Catch::Contains("bf16 products"));
  OpContext no_scratch;
  no_scratch.precision = ComputePrecision::bf16;
  const Tensor xf = Tensor::zeros(Shape{2, 3}, DType::f32);
  const Tensor wf = Tensor::zeros(Shape{4, 3}, DType::f32);
  const Tensor yf = Tensor::zeros(Shape{2, 4}, DType::f32);
  CHECK_THROWS_WITH(linear_forward(no_scratch, xf, wf, yf), Catch::Contains("scratch"));
}
