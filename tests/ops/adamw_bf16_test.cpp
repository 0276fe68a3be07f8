// AdamW with bf16-stored moments (the precision-aware optimizer): fp32 update math, moments
// rounded to nearest even when stored.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "ops/adamw.hpp"

using namespace dyncp;
using core::DType;
using core::Shape;
using core::Tensor;

namespace {

// Nearest bf16 to a double, ties to even, computed from the value's binary exponent (a
// different route from core::float_to_bf16_bits, which works on fp32 bit patterns).
double round_to_bf16(double value) {
  if (value == 0) return value;
  int exponent = 0;
  std::frexp(value, &exponent);                      // |value| in [2^(exponent-1), 2^exponent)
  const double ulp = std::ldexp(1.0, exponent - 8);  // 8 significant bits
  return std::nearbyint(value / ulp) * ulp;          // default rounding mode: ties to even
}

float bf16_value(const Tensor& t, std::int64_t i) {
  return core::bf16_bits_to_float(t.bf16_bits()[i]);
}

Tensor f32_random(std::int64_t n, std::uint64_t seed, float scale) {
  Tensor t = Tensor::empty(Shape{n}, DType::f32);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto bits =
        core::random_bits(seed, core::RngPurpose::test, 0, static_cast<std::uint64_t>(i));
    t.data<float>()[i] = scale * (static_cast<float>(bits >> 40) * 0x1.0p-24f * 2.0f - 1.0f);
  }
  return t;
}

ops::AdamWParams params_at(std::int64_t step) {
  ops::AdamWParams params;
  params.lr = 1e-3;
  params.beta1 = 0.9;
  params.beta2 = 0.95;
  params.eps = 1e-8;
  params.weight_decay = 0.1;
  params.step = step;
  params.grad_scale = 0.5;
  return params;
}

}  // namespace

TEST_CASE("AdamW with bf16 moments tracks the fp32-moment run", "[ops][adamw][bf16]") {
  const bool bf16_avg = GENERATE(true, false);
  const bool bf16_avg_sq = GENERATE(true, false);
  if (!bf16_avg && !bf16_avg_sq) return;
  const ops::OpContext ctx;
  const std::int64_t n = 4096;
  const int steps = 20;
  const Tensor p32 = f32_random(n, 1, 1.0f), p16 = f32_random(n, 1, 1.0f);
  const Tensor m32 = Tensor::zeros(Shape{n}, DType::f32), v32 = Tensor::zeros(Shape{n}, DType::f32);
  const Tensor m16 = Tensor::zeros(Shape{n}, bf16_avg ? DType::bf16 : DType::f32);
  const Tensor v16 = Tensor::zeros(Shape{n}, bf16_avg_sq ? DType::bf16 : DType::f32);
  // Largest |m| and v each element reaches: the scale its rounding errors are relative to.
  std::vector<double> m_scale(static_cast<std::size_t>(n)), v_scale(static_cast<std::size_t>(n));
  for (int step = 1; step <= steps; ++step) {
    const Tensor grad = f32_random(n, 100 + static_cast<std::uint64_t>(step), 2.0f);
    ops::adamw_step(ctx, p32, grad, m32, v32, params_at(step), true);
    ops::adamw_step(ctx, p16, grad, m16, v16, params_at(step), true);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      m_scale[k] = std::max(m_scale[k], std::abs(static_cast<double>(m32.data<float>()[i])));
      v_scale[k] = std::max(v_scale[k], static_cast<double>(v32.data<float>()[i]));
    }
  }
  // Each update moves a parameter by at most about lr; bf16 storage (relative error 2^-9 per
  // moment per step) perturbs an update by well under 1%. Bound: 1% of the total movement.
  const double tolerance = 0.01 * steps * params_at(1).lr;
  // A moment's stored error: at most 2^-9 of its size per step, decaying by beta each step, so
  // below 2^-9 · max size / (1 - beta) (beta1 = 0.9, beta2 = 0.95).
  const double m_bound = 0x1.0p-9 / (1 - 0.9), v_bound = 0x1.0p-9 / (1 - 0.95);
  double worst = 0;
  int moments_differ = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    worst = std::max(worst, std::abs(static_cast<double>(p16.data<float>()[i]) -
                                     static_cast<double>(p32.data<float>()[i])));
    const double m_ref = m32.data<float>()[i], v_ref = v32.data<float>()[i];
    if (bf16_avg) {
      const double m = bf16_value(m16, i);
      CHECK(std::abs(m - m_ref) <= m_bound * m_scale[k]);
      if (m != m_ref) ++moments_differ;
    } else {
      CHECK(m16.data<float>()[i] == m32.data<float>()[i]);  // fp32 moment: fp32 arithmetic
    }
    if (bf16_avg_sq) {
      const double v = bf16_value(v16, i);
      CHECK(std::abs(v - v_ref) <= v_bound * v_scale[k]);
      if (v != v_ref) ++moments_differ;
    } else {
      CHECK(v16.data<float>()[i] == v32.data<float>()[i]);
    }
  }
  INFO("worst parameter difference " << worst << ", tolerance " << tolerance);
  CHECK(worst <= tolerance);
  CHECK(worst > 0);  // the bf16 path really rounds
  CHECK(moments_differ > n / 2);
}

TEST_CASE("one AdamW step with given bf16 moments matches an f64 reference", "[ops][adamw][bf16]") {
  const ops::OpContext ctx;
  const bool decay = GENERATE(false, true);
  // bf16-representable starting moments.
  const std::vector<double> p0 = {1.0, -2.0, 0.375, 3.0e-3};
  const std::vector<double> g0 = {0.5, -4.0, 1.0e-3, 7.0};
  const std::vector<double> m0 = {0.1015625, 0.0, -0.0234375, 1.5};
  const std::vector<double> v0 = {0.010009765625, 0.0, 3.0517578125e-05, 2.25};
  const auto n = static_cast<std::int64_t>(p0.size());
  const Tensor param = Tensor::empty(Shape{n}, DType::f32),
               grad = Tensor::empty(Shape{n}, DType::f32);
  const Tensor m = Tensor::empty(Shape{n}, DType::bf16), v = Tensor::empty(Shape{n}, DType::bf16);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    param.data<float>()[i] = static_cast<float>(p0[k]);
    grad.data<float>()[i] = static_cast<float>(g0[k]);
    REQUIRE(round_to_bf16(m0[k]) == m0[k]);
    REQUIRE(round_to_bf16(v0[k]) == v0[k]);
    m.bf16_bits()[i] = core::float_to_bf16_bits(static_cast<float>(m0[k]));
    v.bf16_bits()[i] = core::float_to_bf16_bits(static_cast<float>(v0[k]));
  }
  ops::AdamWParams params;
  params.lr = 0.1;
  params.beta1 = 0.9;
  params.beta2 = 0.99;
  params.eps = 1e-8;
  params.weight_decay = 0.5;
  params.step = 3;
  params.grad_scale = 0.5;
  ops::adamw_step(ctx, param, grad, m, v, params, decay);
  const double bias1 = 1 - std::pow(0.9, 3), bias2 = 1 - std::pow(0.99, 3);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double g = 0.5 * g0[k];
    const double m_expected = round_to_bf16(0.9 * m0[k] + 0.1 * g);
    const double v_expected = round_to_bf16(0.99 * v0[k] + 0.01 * g * g);
    INFO("element " << i);
    CHECK(static_cast<double>(bf16_value(m, i)) == m_expected);
    CHECK(static_cast<double>(bf16_value(v, i)) == v_expected);
    // The parameter update uses the moments as stored.
    const double p = (decay ? p0[k] * (1 - 0.1 * 0.5) : p0[k]) -
                     0.1 * (m_expected / bias1) / (std::sqrt(v_expected / bias2) + 1e-8);
    CHECK(static_cast<double>(param.data<float>()[i]) == Approx(p).epsilon(1e-6).margin(1e-7));
  }
}

TEST_CASE("AdamW bf16 moments need f32 parameters", "[ops][adamw][bf16]") {
  const ops::OpContext ctx;
  const Tensor param = Tensor::zeros(Shape{4}, DType::f64),
               grad = Tensor::zeros(Shape{4}, DType::f64);
  const Tensor m = Tensor::zeros(Shape{4}, DType::bf16), v = Tensor::zeros(Shape{4}, DType::f64);
  REQUIRE_THROWS_WITH(ops::adamw_step(ctx, param, grad, m, v, params_at(1), true),
                      Catch::Contains("exp_avg in bf16 needs f32 param"));
  const Tensor v_i32 = Tensor::zeros(Shape{4}, DType::i32);
  const Tensor p32 = Tensor::zeros(Shape{4}, DType::f32), g32 = Tensor::zeros(Shape{4}, DType::f32);
  REQUIRE_THROWS_WITH(ops::adamw_step(ctx, p32, g32, m, v_i32, params_at(1), true),
                      Catch::Contains("exp_avg_sq must be f32"));
}
