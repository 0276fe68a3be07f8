// The small ops of the hybrid (Qwen3-Next / 3.5) layers: gated RMSNorm, L2 norm, sigmoid gates,
// head-half split, the Gated DeltaNet gates; finite differences in f64 and the variant checks
// that would fail if the plain and zero-centred weights were swapped.

#include <cmath>

#include "op_test_utils.hpp"
#include "ops/gated_delta_gates.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/head_halves.hpp"
#include "ops/l2norm.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/sigmoid_gate.hpp"

namespace dyncp::ops::test {
namespace {

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

TEST_CASE("zero-centred and plain RMSNorm weights are different functions",
          "[ops][rmsnorm][hybrid]") {
  // With w = 0 (the zero-centred identity) the 1 + w variant is x̂ and the plain variant is 0;
  // with w = 1 (the plain identity) the plain variant is x̂ and the 1 + w variant is 2 x̂.
  const OpContext ctx;
  const Tensor x = random_tensor(Shape{3, 8}, DType::f64, 40);
  const Tensor zeros = Tensor::zeros(Shape{8}, DType::f64);
  const Tensor ones = Tensor::empty(Shape{8}, DType::f64);
  for (int j = 0; j < 8; ++j) set_element(ones, j, 1.0);
  RmsNormSaved saved{Tensor::empty(Shape{3}, DType::f64)};
  const Tensor one_plus = Tensor::empty(x.shape(), DType::f64);
  const Tensor plain = Tensor::empty(x.shape(), DType::f64);
  rmsnorm_forward(ctx, x, zeros, 1e-6, RmsNormVariant::one_plus_weight, one_plus, saved);
  rmsnorm_forward(ctx, x, ones, 1e-6, RmsNormVariant::plain, plain, saved);
  require_close(one_plus, plain, 1e-14, 1e-14, "identity weights");
  rmsnorm_forward(ctx, x, zeros, 1e-6, RmsNormVariant::plain, plain, saved);
  CHECK(dot(plain, plain) == 0.0);
  rmsnorm_forward(ctx, x, ones, 1e-6, RmsNormVariant::one_plus_weight, one_plus, saved);
  rmsnorm_forward(ctx, x, ones, 1e-6, RmsNormVariant::plain, plain, saved);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    CHECK(element(one_plus, i) == Approx(2 * element(plain, i)).epsilon(1e-14));
}

TEST_CASE("gated RMSNorm uses the plain weight times silu(z) and matches finite differences",
          "[ops][gated_rmsnorm][fd]") {
  const OpContext ctx;
  // n = 1 is left out: x̂ = ±1 up to eps there, so dx is ~eps and finite differences are noise.
  const std::int64_t rows = GENERATE(1, 5), n = GENERATE(2, 6, 19);
  const Tensor x = random_tensor(Shape{rows, 2, n}, DType::f64, 41);
  const Tensor z = random_tensor(x.shape(), DType::f64, 42);
  const Tensor w = random_tensor(Shape{n}, DType::f64, 43, 0.5);
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  RmsNormSaved saved{Tensor::empty(Shape{rows * 2}, DType::f64)};
  gated_rmsnorm_forward(ctx, x, z, w, 1e-6, y, saved);
  // Element 0 by the formula: w · x̂ · silu(z), with w itself (a 1 + w weight would differ).
  double mean_sq = 0;
  for (std::int64_t j = 0; j < n; ++j) mean_sq += element(x, j) * element(x, j) / double(n);
  const double z0 = element(z, 0);
  CHECK(element(y, 0) ==
        Approx(element(w, 0) * element(x, 0) / std::sqrt(mean_sq + 1e-6) * z0 * sigmoid(z0))
            .epsilon(1e-12));
  const Tensor dy = random_tensor(x.shape(), DType::f64, 44);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  const Tensor dz = Tensor::empty(x.shape(), DType::f64);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f64);
  gated_rmsnorm_backward(ctx, dy, x, z, w, saved, dx, dz, dw);
  auto loss = [&] {
    gated_rmsnorm_forward(ctx, x, z, w, 1e-6, y, saved);
    return dot(y, dy);
  };
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  CHECK(finite_difference_error(z, dz, loss) < kFdTolerance);
  CHECK(finite_difference_error(w, dw, loss) < kFdTolerance);
  // dweight accumulates.
  const Tensor dw_twice = clone(dw);
  gated_rmsnorm_backward(ctx, dy, x, z, w, saved, Tensor(), Tensor(), dw_twice);
  for (std::int64_t j = 0; j < n; ++j)
    CHECK(element(dw_twice, j) == Approx(2 * element(dw, j)).epsilon(1e-12));
}

TEST_CASE("L2 norm puts eps inside the sum of squares and matches finite differences",
          "[ops][l2norm][fd]") {
  const OpContext ctx;
  const std::int64_t n = GENERATE(1, 5, 17);
  const double eps = 1e-6;
  const Tensor x = random_tensor(Shape{4, 3, n}, DType::f64, 45, 0.01);  // small: eps matters
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  L2NormSaved saved{Tensor::empty(Shape{12}, DType::f64)};
  l2norm_forward(ctx, x, eps, y, saved);
  double sum_sq = 0;
  for (std::int64_t j = 0; j < n; ++j) sum_sq += element(x, j) * element(x, j);
  CHECK(element(y, 0) == Approx(element(x, 0) / std::sqrt(sum_sq + eps)).epsilon(1e-13));
  const Tensor dy = random_tensor(x.shape(), DType::f64, 46);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  l2norm_backward(ctx, dy, y, saved, dx);
  auto loss = [&] {
    l2norm_forward(ctx, x, eps, y, saved);
    return dot(y, dy);
  };
  CHECK(finite_difference_error(x, dx, loss, 1e-7) < kFdTolerance);
  // In place forward, then backward into dy's own storage.
  l2norm_forward(ctx, x, eps, y, saved);  // the finite differences left y perturbed
  const Tensor inplace = clone(x);
  l2norm_forward(ctx, inplace, eps, inplace, saved);
  require_close(inplace, y, 1e-15, 1e-15, "in place");
  const Tensor dy_copy = clone(dy);
  l2norm_backward(ctx, dy_copy, inplace, saved, dy_copy);
  require_close(dy_copy, dx, 1e-14, 1e-14, "dx aliasing dy");
}

TEST_CASE("element-wise sigmoid gate and its backward", "[ops][sigmoid_gate][fd]") {
  const OpContext ctx;
  const Tensor x = random_tensor(Shape{5, 2, 7}, DType::f64, 47);
  const Tensor gate = random_tensor(x.shape(), DType::f64, 48);
  const Tensor out = Tensor::empty(x.shape(), DType::f64);
  sigmoid_gate_forward(ctx, x, gate, out);
  CHECK(element(out, 3) == Approx(element(x, 3) * sigmoid(element(gate, 3))).epsilon(1e-14));
  const Tensor dout = random_tensor(x.shape(), DType::f64, 49);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  const Tensor dgate = Tensor::empty(x.shape(), DType::f64);
  sigmoid_gate_backward(ctx, dout, x, gate, dx, dgate);
  auto loss = [&] {
    sigmoid_gate_forward(ctx, x, gate, out);
    return dot(out, dout);
  };
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  CHECK(finite_difference_error(gate, dgate, loss) < kFdTolerance);
}

TEST_CASE("row sigmoid gate (shared expert) overwrites or accumulates, with backward",
          "[ops][sigmoid_gate][fd]") {
  const OpContext ctx;
  const Tensor x = random_tensor(Shape{6, 9}, DType::f64, 50);
  const Tensor gate = random_tensor(Shape{6, 1}, DType::f64, 51);
  const Tensor out = Tensor::empty(x.shape(), DType::f64);
  sigmoid_row_gate_forward(ctx, x, gate, out);
  CHECK(element(out, 2 * 9 + 4) ==
        Approx(element(x, 2 * 9 + 4) * sigmoid(element(gate, 2))).epsilon(1e-14));
  const Tensor routed = random_tensor(x.shape(), DType::f64, 52);
  const Tensor sum = clone(routed);
  sigmoid_row_gate_forward(ctx, x, gate, sum, GradMode::accumulate);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    CHECK(element(sum, i) == Approx(element(routed, i) + element(out, i)).epsilon(1e-14));
  const Tensor dout = random_tensor(x.shape(), DType::f64, 53);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  const Tensor dgate = Tensor::empty(gate.shape(), DType::f64);
  sigmoid_row_gate_backward(ctx, dout, x, gate, dx, dgate);
  auto loss = [&] {
    sigmoid_row_gate_forward(ctx, x, gate, out);
    return dot(out, dout);
  };
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  CHECK(finite_difference_error(gate, dgate, loss) < kFdTolerance);
  CHECK_THROWS_WITH(sigmoid_row_gate_forward(ctx, x, Tensor::empty(Shape{5}, DType::f64), out),
                    Catch::Contains("sigmoid_row_gate_forward") && Catch::Contains("one logit"));
}

TEST_CASE("head halves split per head (query then gate) and merge back", "[ops][head_halves]") {
  const OpContext ctx;
  const Tensor packed = random_tensor(Shape{3, 2, 8}, DType::f64, 54);
  const Tensor first = Tensor::empty(Shape{3, 2, 4}, DType::f64);
  const Tensor second = Tensor::empty(Shape{3, 2, 4}, DType::f64);
  split_head_halves(ctx, packed, first, second);
  // Token 1, head 1: query = packed[1, 1, 0:4], gate = packed[1, 1, 4:8].
  for (int j = 0; j < 4; ++j) {
    CHECK(element(first, (1 * 2 + 1) * 4 + j) == element(packed, (1 * 2 + 1) * 8 + j));
    CHECK(element(second, (1 * 2 + 1) * 4 + j) == element(packed, (1 * 2 + 1) * 8 + 4 + j));
  }
  const Tensor merged = Tensor::empty(packed.shape(), DType::f64);
  merge_head_halves(ctx, first, second, merged);
  require_close(merged, packed, 0, 0, "round trip");
}

TEST_CASE("Gated DeltaNet gates: beta = σ(b), g = −exp(A_log) softplus(a + dt_bias)",
          "[ops][gdn_gates][fd]") {
  const OpContext ctx;
  const Tensor a = random_tensor(Shape{7, 3}, DType::f64, 55, 2.0);
  const Tensor b = random_tensor(Shape{7, 3}, DType::f64, 56);
  const Tensor a_log = random_tensor(Shape{3}, DType::f64, 57, 0.5);
  const Tensor dt_bias = random_tensor(Shape{3}, DType::f64, 58);
  set_element(a, 0, 30.0);  // above PyTorch's softplus threshold: softplus(x) = x
  const Tensor g = Tensor::empty(a.shape(), DType::f64);
  const Tensor beta = Tensor::empty(a.shape(), DType::f64);
  gated_delta_gates_forward(ctx, a, b, a_log, dt_bias, g, beta);
  const double x = element(a, 4) + element(dt_bias, 1);
  CHECK(element(g, 4) ==
        Approx(-std::exp(element(a_log, 1)) * std::log1p(std::exp(x))).epsilon(1e-13));
  CHECK(element(beta, 4) == Approx(sigmoid(element(b, 4))).epsilon(1e-14));
  CHECK(element(g, 0) ==
        Approx(-std::exp(element(a_log, 0)) * (30.0 + element(dt_bias, 0))).epsilon(1e-14));
  const Tensor dg = random_tensor(a.shape(), DType::f64, 59);
  const Tensor dbeta = random_tensor(a.shape(), DType::f64, 60);
  const Tensor da = Tensor::empty(a.shape(), DType::f64);
  const Tensor db = Tensor::empty(a.shape(), DType::f64);
  const Tensor da_log = Tensor::zeros(Shape{3}, DType::f64);
  const Tensor ddt_bias = Tensor::zeros(Shape{3}, DType::f64);
  gated_delta_gates_backward(ctx, dg, dbeta, a, b, a_log, dt_bias, da, db, da_log, ddt_bias);
  auto loss = [&] {
    gated_delta_gates_forward(ctx, a, b, a_log, dt_bias, g, beta);
    return dot(g, dg) + dot(beta, dbeta);
  };
  CHECK(finite_difference_error(a, da, loss) < kFdTolerance);
  CHECK(finite_difference_error(b, db, loss) < kFdTolerance);
  CHECK(finite_difference_error(a_log, da_log, loss) < kFdTolerance);
  CHECK(finite_difference_error(dt_bias, ddt_bias, loss) < kFdTolerance);
}

}  // namespace dyncp::ops::test
