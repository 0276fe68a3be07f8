// Finite-difference and reference checks for embedding, RMSNorm, RoPE and SwiGLU.

#include <cmath>

#include "core/error.hpp"
#include "op_test_utils.hpp"
#include "ops/embedding.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "ops/swiglu.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

TEST_CASE("embedding gathers rows and its backward sums repeated ids", "[ops][embedding][fd]") {
  const OpContext ctx;
  const Tensor table = random_tensor(Shape{11, 6}, DType::f64, 1);
  const Tensor ids = int_tensor({3, 0, 3, 10, 7});
  const Tensor out = Tensor::empty(Shape{5, 6}, DType::f64);
  embedding_forward(ctx, ids, table, out);
  for (int j = 0; j < 6; ++j) CHECK(element(out, 3 * 6 + j) == element(table, 10 * 6 + j));
  const Tensor dout = random_tensor(out.shape(), DType::f64, 2);
  const Tensor dtable = Tensor::zeros(table.shape(), DType::f64);
  embedding_backward(ctx, ids, dout, dtable);
  auto loss = [&] {
    embedding_forward(ctx, ids, table, out);
    return dot(out, dout);
  };
  CHECK(finite_difference_error(table, dtable, loss) < kFdTolerance);
  // padding_idx 3 (nn.Embedding's): that row gets nothing, every other row the same.
  const Tensor padded = Tensor::zeros(table.shape(), DType::f64);
  embedding_backward(ctx, ids, dout, padded, 3);
  for (int row = 0; row < 11; ++row) {
    for (int j = 0; j < 6; ++j) {
      CHECK(element(padded, row * 6 + j) == (row == 3 ? 0.0 : element(dtable, row * 6 + j)));
    }
  }
  CHECK(element(dtable, 3 * 6) != 0.0);

  const Tensor bad = int_tensor({1, 11});
  const Tensor out2 = Tensor::empty(Shape{2, 6}, DType::f64);
  try {
    embedding_forward(ctx, bad, table, out2);
    FAIL("expected a data error");
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    CHECK_THAT(error.what(), Catch::Contains("token 1") && Catch::Contains("11"));
  }
}

TEST_CASE("rmsnorm forward and backward, both variants", "[ops][rmsnorm][fd]") {
  const OpContext ctx;
  const auto variant = GENERATE(RmsNormVariant::plain, RmsNormVariant::one_plus_weight);
  const std::int64_t rows = GENERATE(1, 3), n = GENERATE(1, 7, 24);
  const Tensor x = random_tensor(Shape{rows, 2, n}, DType::f64, 3);  // per-head form [T, H, d]
  const Tensor w = random_tensor(Shape{n}, DType::f64, 4, 0.3);
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  RmsNormSaved saved{Tensor::empty(Shape{rows * 2}, DType::f64)};
  const double eps = 1e-6;
  rmsnorm_forward(ctx, x, w, eps, variant, y, saved);
  // Direct formula on one element.
  double mean_sq = 0;
  for (std::int64_t j = 0; j < n; ++j)
    mean_sq += element(x, j) * element(x, j) / static_cast<double>(n);
  const double w_eff = (variant == RmsNormVariant::plain ? 0.0 : 1.0) + element(w, 0);
  CHECK(element(y, 0) == Approx(w_eff * element(x, 0) / std::sqrt(mean_sq + eps)).epsilon(1e-12));

  const Tensor dy = random_tensor(x.shape(), DType::f64, 5);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f64);
  rmsnorm_backward(ctx, dy, x, w, variant, saved, dx, dw);
  auto loss = [&] {
    rmsnorm_forward(ctx, x, w, eps, variant, y, saved);
    return dot(y, dy);
  };
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  CHECK(finite_difference_error(w, dw, loss) < kFdTolerance);
}

TEST_CASE("rope rotates pairs (j, j + d_rot/2), passes the rest, and inverts", "[ops][rope][fd]") {
  const OpContext ctx;
  const int head_dim = 10;
  const int rotary_dim = GENERATE(2, 6, 10);
  const RopeParams params{10000.0, rotary_dim};
  const Tensor x = random_tensor(Shape{4, 3, head_dim}, DType::f64, 6);
  const Tensor positions = int_tensor({0, 5, 2, 1000});
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  rope_forward(ctx, x, positions, params, y);
  // Token 1 (position 5), head 2, pair index 1.
  const int half = rotary_dim / 2;
  const double angle = 5.0 * std::pow(10000.0, -2.0 / rotary_dim);
  const std::int64_t base = (1 * 3 + 2) * head_dim;
  if (half > 1) {
    CHECK(element(y, base + 1) == Approx(element(x, base + 1) * std::cos(angle) -
                                         element(x, base + 1 + half) * std::sin(angle)));
  }
  for (int j = rotary_dim; j < head_dim; ++j) CHECK(element(y, base + j) == element(x, base + j));
  for (int j = 0; j < head_dim; ++j) CHECK(element(y, j) == Approx(element(x, j)));  // position 0

  const Tensor dy = random_tensor(x.shape(), DType::f64, 7);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  rope_backward(ctx, dy, positions, params, dx);
  auto loss = [&] {
    rope_forward(ctx, x, positions, params, y);
    return dot(y, dy);
  };
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  // In place: forward then backward of the same tensor restores it.
  const Tensor z = clone(x);
  rope_forward(ctx, z, positions, params, z);
  rope_backward(ctx, z, positions, params, z);
  require_close(z, x, 1e-12, 1e-12, "round trip");
  CHECK_THROWS_WITH(rope_forward(ctx, x, positions, RopeParams{10000.0, 3}, y),
                    Catch::Contains("rotary_dim"));
}

TEST_CASE("scaled rope: YaRN's attention factor and an odd frequency_dim keep the backward exact",
          "[ops][rope][fd]") {
  const OpContext ctx;
  RopeParams params{10000.0, 8};
  params.scaling = {
      .type = RopeScalingType::yarn, .factor = 4.0, .original_max_position_embeddings = 16};
  const RopeFrequencies yarn = rope_frequencies(params);
  CHECK(yarn.attention_factor == Approx(0.1 * std::log(4.0) + 1.0));
  // The fastest frequency is extrapolated (unchanged), the slowest interpolated (divided by 4).
  CHECK(yarn.inv_freq[0] == Approx(1.0));
  CHECK(yarn.inv_freq[3] == Approx(std::pow(10000.0, -6.0 / 8) / 4.0));
  RopeParams odd{10000.0, 4, 3};  // HF's rotary dim 3: two frequencies over n = 3
  odd.scaling = {.type = RopeScalingType::linear, .factor = 2.0};
  const RopeFrequencies linear = rope_frequencies(odd);
  CHECK(linear.count == 2);
  CHECK(linear.inv_freq[1] == Approx(std::pow(10000.0, -2.0 / 3) / 2.0));
  for (const RopeParams& p : {params, odd}) {
    const Tensor x = random_tensor(Shape{4, 2, 8}, DType::f64, 16);
    const Tensor positions = int_tensor({0, 5, 2, 1000});
    const Tensor y = Tensor::empty(x.shape(), DType::f64);
    const Tensor dy = random_tensor(x.shape(), DType::f64, 17);
    const Tensor dx = Tensor::empty(x.shape(), DType::f64);
    rope_backward(ctx, dy, positions, p, dx);
    auto loss = [&] {
      rope_forward(ctx, x, positions, p, y);
      return dot(y, dy);
    };
    CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  }
  params.frequency_dim = 7;  // YaRN's ramp needs an even n
  CHECK_THROWS_WITH(rope_frequencies(params), Catch::Contains("even frequency_dim"));
}

TEST_CASE("dynamic NTK rope: default up to max_position_embeddings, then a base per length",
          "[ops][rope]") {
  RopeParams params{10000.0, 16};
  params.scaling = {.type = RopeScalingType::dynamic, .factor = 2.0};
  params.scaling.max_position_embeddings = 64;
  const RopeFrequencies plain = rope_frequencies(RopeParams{10000.0, 16});
  for (const std::int64_t length : {0, 1, 64}) {
    params.scaling.sequence_length = length;
    const RopeFrequencies within = rope_frequencies(params);
    for (int i = 0; i < within.count; ++i) CHECK(within.inv_freq[i] == plain.inv_freq[i]);
  }
  // transformers' _compute_dynamic_ntk_parameters at seq_len 128: base 10^4 (2·2 − 1)^(16/14).
  params.scaling.sequence_length = 128;
  const double base = 10000.0 * std::pow(3.0, 16.0 / 14.0);
  const RopeFrequencies long_one = rope_frequencies(params);
  for (int i = 0; i < long_one.count; ++i)
    CHECK(long_one.inv_freq[i] == Approx(std::pow(base, -2.0 * i / 16)).epsilon(1e-14));
  CHECK(long_one.attention_factor == 1.0);
  params.scaling.sequence_length = 256;  // longer: a larger base, slower frequencies
  CHECK(rope_frequencies(params).inv_freq[7] < long_one.inv_freq[7]);
  // HF's dim / (dim − 2) exponent is over the frequency dim n (here 6, a partial rotary width).
  RopeParams partial{10000.0, 6, 6};
  partial.scaling = params.scaling;
  partial.scaling.sequence_length = 128;
  CHECK(rope_frequencies(partial).inv_freq[1] ==
        Approx(std::pow(10000.0 * std::pow(3.0, 6.0 / 4.0), -2.0 / 6)).epsilon(1e-14));
  partial.scaling.max_position_embeddings = 0;
  CHECK_THROWS_WITH(rope_frequencies(partial), Catch::Contains("max_position_embeddings"));
}

TEST_CASE("swiglu split and fused layouts agree and match finite differences",
          "[ops][swiglu][fd]") {
  const OpContext ctx;
  const std::int64_t rows = GENERATE(1, 4), width = GENERATE(1, 9);
  const Tensor gate_up = random_tensor(Shape{rows, 2 * width}, DType::f64, 8, 2.0);
  const Tensor gate = Tensor::empty(Shape{rows, width}, DType::f64);
  const Tensor up = Tensor::empty(Shape{rows, width}, DType::f64);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < width; ++j) {
      set_element(gate, r * width + j, element(gate_up, r * 2 * width + j));
      set_element(up, r * width + j, element(gate_up, r * 2 * width + width + j));
    }
  }
  const Tensor out = Tensor::empty(Shape{rows, width}, DType::f64);
  const Tensor out_fused = Tensor::empty(Shape{rows, width}, DType::f64);
  swiglu_forward(ctx, gate, up, out);
  swiglu_fused_forward(ctx, gate_up, out_fused);
  require_close(out_fused, out, 0, 0, "fused");
  const double a = element(gate, 0);
  CHECK(element(out, 0) == Approx(a / (1 + std::exp(-a)) * element(up, 0)));

  const Tensor dout = random_tensor(out.shape(), DType::f64, 9);
  const Tensor dgate = Tensor::empty(gate.shape(), DType::f64);
  const Tensor dup = Tensor::empty(up.shape(), DType::f64);
  swiglu_backward(ctx, dout, gate, up, dgate, dup);
  auto loss = [&] {
    swiglu_forward(ctx, gate, up, out);
    return dot(out, dout);
  };
  CHECK(finite_difference_error(gate, dgate, loss) < kFdTolerance);
  CHECK(finite_difference_error(up, dup, loss) < kFdTolerance);
  const Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::f64);
  swiglu_fused_backward(ctx, dout, gate_up, dgate_up);
  auto fused_loss = [&] {
    swiglu_fused_forward(ctx, gate_up, out_fused);
    return dot(out_fused, dout);
  };
  CHECK(finite_difference_error(gate_up, dgate_up, fused_loss) < kFdTolerance);
}

TEST_CASE("swiglu in f32 (vectorised exp) agrees with f64", "[ops][swiglu]") {
  const OpContext ctx;
  const Tensor gate64 = random_tensor(Shape{3, 37}, DType::f64, 30, 4.0),
               up64 = random_tensor(Shape{3, 37}, DType::f64, 31);
  const Tensor gate = Tensor::empty(gate64.shape(), DType::f32),
               up = Tensor::empty(up64.shape(), DType::f32);
  for (std::int64_t i = 0; i < gate.numel(); ++i) {
    set_element(gate, i, element(gate64, i));
    set_element(up, i, element(up64, i));
    set_element(gate64, i, element(gate, i));  // same rounded inputs for both
    set_element(up64, i, element(up, i));
  }
  const Tensor out = Tensor::empty(gate.shape(), DType::f32),
               out64 = Tensor::empty(gate.shape(), DType::f64);
  swiglu_forward(ctx, gate, up, out);
  swiglu_forward(ctx, gate64, up64, out64);
  require_close(out, out64, 2e-6, 1e-7, "f32 swiglu");
  const Tensor dout = random_tensor(gate.shape(), DType::f32, 32),
               dout64 = Tensor::empty(gate.shape(), DType::f64);
  for (std::int64_t i = 0; i < dout.numel(); ++i) set_element(dout64, i, element(dout, i));
  const Tensor dg = Tensor::empty(gate.shape(), DType::f32),
               du = Tensor::empty(gate.shape(), DType::f32);
  const Tensor dg64 = Tensor::empty(gate.shape(), DType::f64),
               du64 = Tensor::empty(gate.shape(), DType::f64);
  swiglu_backward(ctx, dout, gate, up, dg, du);
  swiglu_backward(ctx, dout64, gate64, up64, dg64, du64);
  require_close(dg, dg64, 2e-6, 1e-7, "f32 dgate");
  require_close(du, du64, 2e-6, 1e-7, "f32 dup");
}

TEST_CASE("rmsnorm dx accumulates on request and dweight always accumulates", "[ops][rmsnorm]") {
  const OpContext ctx;
  const Tensor x = random_tensor(Shape{4, 6}, DType::f64, 40);
  const Tensor w = random_tensor(Shape{6}, DType::f64, 41);
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  RmsNormSaved saved{Tensor::empty(Shape{4}, DType::f64)};
  rmsnorm_forward(ctx, x, w, 1e-6, RmsNormVariant::plain, y, saved);
  const Tensor dy = random_tensor(x.shape(), DType::f64, 42);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64), dw = Tensor::zeros(w.shape(), DType::f64);
  rmsnorm_backward(ctx, dy, x, w, RmsNormVariant::plain, saved, dx, dw);
  const Tensor residual = random_tensor(x.shape(), DType::f64, 43);
  const Tensor joined = clone(residual), dw2 = clone(dw);
  rmsnorm_backward(ctx, dy, x, w, RmsNormVariant::plain, saved, joined, dw2, GradMode::accumulate);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    CHECK(element(joined, i) == Approx(element(residual, i) + element(dx, i)));
  for (std::int64_t i = 0; i < w.numel(); ++i) CHECK(element(dw2, i) == Approx(2 * element(dw, i)));
}
