#include "op_test_utils.hpp"
#include "ops/gemm.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

TEST_CASE("gemm matches a naive product for every transpose combination", "[ops][gemm]") {
  const OpContext ctx;
  const std::int64_t m = GENERATE(1, 7, 65), n = GENERATE(1, 13), k = GENERATE(1, 9);
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, DType::f64, 1);
  const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::f64, 2);
  const Tensor c = random_tensor(Shape{m, n}, DType::f64, 3);
  const Tensor expected = clone(c);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t l = 0; l < k; ++l) {
        sum += element(a, ta ? l * m + i : i * k + l) * element(b, tb ? j * k + l : l * n + j);
      }
      set_element(expected, i * n + j, element(expected, i * n + j) + 0.5 * sum);
    }
  }
  gemm(ctx, a, ta ? Transpose::yes : Transpose::no, b, tb ? Transpose::yes : Transpose::no, c, 0.5,
       /*accumulate=*/true);
  require_close(c, expected, 1e-12, 1e-12, "c");
}

TEST_CASE("gemm rejects mismatched shapes naming the op", "[ops][gemm]") {
  const OpContext ctx;
  const Tensor a = Tensor::zeros(Shape{3, 4}, DType::f32);
  const Tensor b = Tensor::zeros(Shape{5, 2}, DType::f32);
  const Tensor c = Tensor::zeros(Shape{3, 2}, DType::f32);
  CHECK_THROWS_WITH(gemm(ctx, a, Transpose::no, b, Transpose::no, c),
                    Catch::Contains("gemm") && Catch::Contains("[3, 4]"));
  const Tensor c64 = Tensor::zeros(Shape{3, 2}, DType::f64);
  const Tensor b2 = Tensor::zeros(Shape{4, 2}, DType::f32);
  CHECK_THROWS_WITH(gemm(ctx, a, Transpose::no, b2, Transpose::no, c64), Catch::Contains("dtype"));
  OpContext cuda_ctx;
  cuda_ctx.device = Device::cuda;
  CHECK_THROWS_WITH(gemm(cuda_ctx, a, Transpose::no, b2, Transpose::no, c),
                    Catch::Contains("cuda"));
}

TEST_CASE("linear backward matches finite differences", "[ops][gemm][fd]") {
  const OpContext ctx;
  const std::int64_t rows = GENERATE(1, 5), in = GENERATE(1, 7), out = GENERATE(3, 11);
  const Tensor x = random_tensor(Shape{rows, in}, DType::f64, 10);
  const Tensor w = random_tensor(Shape{out, in}, DType::f64, 11);
  const Tensor y = Tensor::empty(Shape{rows, out}, DType::f64);
  const Tensor dy = random_tensor(Shape{rows, out}, DType::f64, 12);
  auto loss = [&] {
    linear_forward(ctx, x, w, y);
    return dot(y, dy);
  };
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f64);
  linear_backward(ctx, dy, x, w, dx, dw);
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  CHECK(finite_difference_error(w, dw, loss) < kFdTolerance);
  // Parameter gradients accumulate; input gradients overwrite unless asked to accumulate.
  const Tensor dw_before = clone(dw), dx_before = clone(dx);
  linear_backward(ctx, dy, x, w, dx, dw);
  for (std::int64_t i = 0; i < dw.numel(); ++i)
    CHECK(element(dw, i) == Approx(2 * element(dw_before, i)));
  require_close(dx, dx_before, 0, 0, "dx overwritten");
  linear_backward(ctx, dy, x, w, dx, Tensor(), GradMode::accumulate);
  for (std::int64_t i = 0; i < dx.numel(); ++i)
    CHECK(element(dx, i) == Approx(2 * element(dx_before, i)));
}

TEST_CASE("grouped linear equals per-expert linear, empty groups included", "[ops][gemm][fd]") {
  const OpContext ctx;
  const std::int64_t in = 5, out = 3;
  // Groups of 2, 0, 3 and 1 rows.
  const Tensor offsets = Tensor::empty(Shape{5}, DType::i64);
  const std::int64_t bounds[] = {0, 2, 2, 5, 6};
  for (int i = 0; i < 5; ++i) offsets.data<std::int64_t>()[i] = bounds[i];
  const Tensor x = random_tensor(Shape{6, in}, DType::f64, 20);
  const Tensor w = random_tensor(Shape{4, out, in}, DType::f64, 21);
  const Tensor y = Tensor::empty(Shape{6, out}, DType::f64);
  grouped_linear_forward(ctx, x, w, offsets, y);
  for (int e = 0; e < 4; ++e) {
    if (bounds[e + 1] == bounds[e]) continue;
    const Tensor expected = Tensor::empty(Shape{bounds[e + 1] - bounds[e], out}, DType::f64);
    linear_forward(ctx, x.slice(bounds[e], bounds[e + 1]), w.select(e), expected);
    require_close(y.slice(bounds[e], bounds[e + 1]), expected, 1e-14, 1e-14, "y");
  }
  const Tensor dy = random_tensor(y.shape(), DType::f64, 22);
  auto loss = [&] {
    grouped_linear_forward(ctx, x, w, offsets, y);
    return dot(y, dy);
  };
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f64);
  grouped_linear_backward(ctx, dy, x, w, offsets, dx, dw);
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  CHECK(finite_difference_error(w, dw, loss) < kFdTolerance);
  for (std::int64_t i = 0; i < out * in; ++i)
    CHECK(element(dw, out * in + i) == 0.0);  // empty group

  offsets.data<std::int64_t>()[2] = 1;  // decreasing
  CHECK_THROWS_WITH(grouped_linear_forward(ctx, x, w, offsets, y), Catch::Contains("decrease"));
}
