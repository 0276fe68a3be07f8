#pragma once
// Helpers for the op tests: seeded random tensors, comparisons that name the index, and a
// central finite-difference gradient check in double precision.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace dyncp::ops::test {

using core::DType;
using core::Shape;
using core::Tensor;

// Normal(0, stddev) values from the test stream `stream`.
inline Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t stream,
                            double stddev = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  core::Rng rng(1234, core::RngPurpose::test, stream);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    // Box–Muller from two uniforms; enough for test data.
    const double u1 = std::max(rng.uniform(), 1e-300), u2 = rng.uniform();
    const double value = stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    if (dtype == DType::f64) {
      t.data<double>()[i] = value;
    } else {
      t.data<float>()[i] = static_cast<float>(value);
    }
  }
  return t;
}

inline Tensor int_tensor(const std::vector<std::int32_t>& values) {
  Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::i32);
  for (std::size_t i = 0; i < values.size(); ++i) t.data<std::int32_t>()[i] = values[i];
  return t;
}

inline Tensor clone(const Tensor& t) {
  Tensor copy = Tensor::empty(t.shape(), t.dtype());
  copy.copy_from(t);
  return copy;
}

inline double element(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::f64 ? t.data<double>()[i] : static_cast<double>(t.data<float>()[i]);
}

inline void set_element(const Tensor& t, std::int64_t i, double value) {
  if (t.dtype() == DType::f64) {
    t.data<double>()[i] = value;
  } else {
    t.data<float>()[i] = static_cast<float>(value);
  }
}

// Σ a ⊙ b
inline double dot(const Tensor& a, const Tensor& b) {
  double sum = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) sum += element(a, i) * element(b, i);
  return sum;
}

// ||a − b|| / max(||b||, floor), with the first mismatching index reported on failure.
inline double relative_error(const Tensor& actual, const Tensor& expected, double floor = 1e-12) {
  REQUIRE(actual.numel() == expected.numel());
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    const double d = element(actual, i) - element(expected, i);
    diff += d * d;
    norm += element(expected, i) * element(expected, i);
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), floor);
}

// Requires |a − e| <= atol + rtol · |e| element-wise; names the first failing index.
inline void require_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                          const std::string& what) {
  REQUIRE(actual.numel() == expected.numel());
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    const double a = element(actual, i), e = element(expected, i);
    const bool both_neg_inf = std::isinf(a) && std::isinf(e) && a < 0 && e < 0;
    if (!both_neg_inf && !(std::abs(a - e) <= atol + rtol * std::abs(e))) {
      FAIL(what << "[" << i << "]: " << a << " vs expected " << e);
    }
  }
}

// Central finite differences of a scalar function of `input` (double tensor), perturbing every
// element (or every `stride`-th one) by ±step. Returns the numeric gradient (zeros where skipped);
// `analytic` is compared only on the perturbed elements.
inline double finite_difference_error(const Tensor& input, const Tensor& analytic,
                                      const std::function<double()>& loss, double step = 1e-5,
                                      std::int64_t stride = 1) {
  REQUIRE(input.dtype() == DType::f64);
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < input.numel(); i += stride) {
    const double saved = element(input, i);
    set_element(input, i, saved + step);
    const double plus = loss();
    set_element(input, i, saved - step);
    const double minus = loss();
    set_element(input, i, saved);
    const double numeric = (plus - minus) / (2 * step);
    const double d = element(analytic, i) - numeric;
    diff += d * d;
    norm += numeric * numeric;
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
}

inline constexpr double kFdTolerance = 1e-6;

}  // namespace dyncp::ops::test
