// Causal depthwise conv1d + SiLU over packed sequences: direct formula, clean window at every
// sequence start (packed == separate), finite differences, f32 against f64.

#include "ops/causal_conv1d.hpp"

#include <cmath>

#include "op_test_utils.hpp"

namespace dyncp::ops::test {

TEST_CASE("causal conv1d + silu: formula, zero window per sequence, finite differences",
          "[ops][conv1d][fd]") {
  const OpContext ctx;
  const std::int64_t kernel = GENERATE(1, 4), channels = GENERATE(1, 5, 300);
  const std::vector<std::int32_t> cu = {0, 2, 2, 9, 15};  // one sequence shorter than K, one empty
  const Tensor x = random_tensor(Shape{15, channels}, DType::f64, 70);
  const Tensor w = random_tensor(Shape{channels, kernel}, DType::f64, 71, 0.5);
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  const Tensor cu_seqlens = int_tensor(cu);
  causal_conv1d_silu_forward(ctx, x, w, cu_seqlens, y);
  // Every element by the formula, with x = 0 before the sequence start.
  for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
    for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
      for (std::int64_t c = 0; c < channels; ++c) {
        double pre = 0;
        for (std::int64_t j = 0; j < kernel; ++j) {
          const std::int64_t source = t - (kernel - 1) + j;
          if (source >= cu[s])
            pre += element(w, c * kernel + j) * element(x, source * channels + c);
        }
        const double expected = pre / (1 + std::exp(-pre));
        if (std::abs(element(y, t * channels + c) - expected) > 1e-13)
          FAIL("y[" << t << ", " << c << "] = " << element(y, t * channels + c) << " vs "
                    << expected);
      }
    }
  }
  const Tensor dy = random_tensor(x.shape(), DType::f64, 72);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f64);
  causal_conv1d_silu_backward(ctx, dy, x, w, cu_seqlens, dx, dw);
  auto loss = [&] {
    causal_conv1d_silu_forward(ctx, x, w, cu_seqlens, y);
    return dot(y, dy);
  };
  const std::int64_t stride = channels > 10 ? 7 : 1;
  CHECK(finite_difference_error(x, dx, loss, 1e-5, stride) < kFdTolerance);
  CHECK(finite_difference_error(w, dw, loss, 1e-5, stride) < kFdTolerance);
}

TEST_CASE("causal conv1d: packed equals separate, and f32 agrees with f64", "[ops][conv1d]") {
  const OpContext ctx;
  const std::vector<std::int32_t> cu = {0, 6, 20};
  const Tensor x = random_tensor(Shape{20, 11}, DType::f64, 73);
  const Tensor w = random_tensor(Shape{11, 4}, DType::f64, 74, 0.5);
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  causal_conv1d_silu_forward(ctx, x, w, int_tensor(cu), y);
  const Tensor second = Tensor::empty(Shape{14, 11}, DType::f64);
  causal_conv1d_silu_forward(ctx, x.slice(6, 20), w, int_tensor({0, 14}), second);
  require_close(second, y.slice(6, 20), 0, 0, "second sequence alone");
  // A one-sequence run over the same bin differs: the window would leak across the boundary.
  const Tensor leaked = Tensor::empty(x.shape(), DType::f64);
  causal_conv1d_silu_forward(ctx, x, w, int_tensor({0, 20}), leaked);
  CHECK(relative_error(leaked.slice(6, 7), y.slice(6, 7)) > 1e-3);

  auto to_f32 = [](const Tensor& t) {
    const Tensor f = Tensor::empty(t.shape(), DType::f32);
    for (std::int64_t i = 0; i < t.numel(); ++i) set_element(f, i, element(t, i));
    return f;
  };
  const Tensor y32 = Tensor::empty(x.shape(), DType::f32);
  causal_conv1d_silu_forward(ctx, to_f32(x), to_f32(w), int_tensor(cu), y32);
  CHECK(relative_error(y32, y) < 1e-6);
  const Tensor dy = random_tensor(x.shape(), DType::f64, 75);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64),
               dx32 = Tensor::empty(x.shape(), DType::f32);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f64),
               dw32 = Tensor::zeros(w.shape(), DType::f32);
  causal_conv1d_silu_backward(ctx, dy, x, w, int_tensor(cu), dx, dw);
  causal_conv1d_silu_backward(ctx, to_f32(dy), to_f32(x), to_f32(w), int_tensor(cu), dx32, dw32);
  CHECK(relative_error(dx32, dx) < 1e-6);
  CHECK(relative_error(dw32, dw) < 1e-6);
  CHECK_THROWS_WITH(causal_conv1d_silu_forward(ctx, x, Tensor::empty(Shape{10, 4}, DType::f64),
                                               int_tensor(cu), y),
                    Catch::Contains("causal_conv1d_silu_forward") && Catch::Contains("weight"));
}

}  // namespace dyncp::ops::test
