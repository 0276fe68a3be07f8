// mixed_precision: bf16_mixed at the model level (docs/precision.md): one packed bin of each
// fixture family (Qwen3-MoE; the hybrid with gated attention and Gated DeltaNet) run with bf16
// products against the same weights in fp32. The loss and the gradients must stay within the
// bf16 tolerances derived in docs/precision.md, bf16 must really change the numbers, and a
// repeated bf16 step is bitwise the same.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>

#include "model_test_support.hpp"

namespace dyncp::model {
namespace {

// docs/precision.md, "Tolerances": u = 2^-8 is bf16's unit roundoff.
constexpr double kUnitRoundoff = 0x1p-8;
constexpr double kLossTolerance = 2 * kUnitRoundoff;  // relative, loss sum of one bin
// Relative L2 of every gradient tensor when no routing decision can flip (top-k = all experts).
constexpr double kTensorTolerance = 32 * kUnitRoundoff;
// With real top-k routing a token whose k-th and (k+1)-th router logits are within the bf16
// noise may pick another expert: its whole contribution moves between two experts' gradients.
// Then the whole gradient is held to 32u and each tensor only to 0.5 (a wrong or missing
// gradient is >= 1).
constexpr double kWholeGradientTolerance = 32 * kUnitRoundoff;
constexpr double kRoutedTensorTolerance = 0.5;

double relative_l2(const float* got, const float* want, std::int64_t n) {
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// every_expert: route every token to every expert (num_experts_per_tok = num_experts), so no
// routing decision can flip and each tensor is held to kTensorTolerance.
void check_fixture(const std::string& name, bool every_expert) {
  const std::string dir = testing::fixture_dir(name);
  const auto fixture = load_hf_model(dir);
  config::ModelArchitecture architecture = fixture->architecture();
  if (every_expert) architecture.num_experts_per_tok = architecture.num_experts;
  ModelOptions options = fixture->options();
  Qwen3MoeModel fp32(architecture, options);
  options.precision = ops::ComputePrecision::bf16;
  Qwen3MoeModel bf16(architecture, options);
  fp32.parameters().copy_values_from(fixture->parameters());
  bf16.parameters().copy_values_from(fixture->parameters());
  const auto sequences = read_batch_json(dir + "/batch.json");

  const auto want = testing::run_batch(fp32, sequences);
  const auto got = testing::run_batch(bf16, sequences);
  REQUIRE(got.result.loss_tokens == want.result.loss_tokens);
  const double loss_error =
      std::abs(got.result.loss_sum - want.result.loss_sum) / std::abs(want.result.loss_sum);
  CHECK(got.result.loss_sum != want.result.loss_sum);  // bf16 products are in effect
  CHECK(loss_error <= kLossTolerance);

  // Gradient tensors by HF name (both models have the same layout); the worst is reported.
  const double tensor_tolerance = every_expert ? kTensorTolerance : kRoutedTensorTolerance;
  const float* base = fp32.parameters().all_grads().data<float>();
  double worst = 0;
  std::string worst_name;
  for (const auto& tensor : fp32.parameters().hf_tensors()) {
    const auto offset = tensor.grad.data<float>() - base;
    const double error =
        relative_l2(got.grads.data() + offset, want.grads.data() + offset, tensor.grad.numel());
    if (error > worst) {
      worst = error;
      worst_name = tensor.name;
    }
    INFO(tensor.name);
    CHECK(error <= tensor_tolerance);
  }
  const double whole = relative_l2(got.grads.data(), want.grads.data(),
                                   static_cast<std::int64_t>(want.grads.size()));
  CHECK(whole <= kWholeGradientTolerance);
  WARN(name << (every_expert ? " (every expert)" : " (top-k)") << ": bf16 vs fp32: loss "
            << loss_error << " relative, worst gradient tensor " << worst_name << " " << worst
            << ", whole gradient " << whole);

  const auto again = testing::run_batch(bf16, sequences);
  CHECK(again.result.loss_sum == got.result.loss_sum);
  CHECK(std::memcmp(again.grads.data(), got.grads.data(), got.grads.size() * sizeof(float)) == 0);
}

TEST_CASE("bf16_mixed stays within the bf16 tolerance of fp32 on Qwen3-MoE", "[model][bf16]") {
  check_fixture("qwen3_moe_a", /*every_expert=*/true);
  check_fixture("qwen3_moe_a", /*every_expert=*/false);
}

TEST_CASE("bf16_mixed stays within the bf16 tolerance of fp32 on the hybrid", "[model][bf16]") {
  check_fixture("qwen3_5_moe_b", /*every_expert=*/true);
  check_fixture("qwen3_5_moe_b", /*every_expert=*/false);
}

TEST_CASE("bf16 products need an f32 model", "[model][bf16]") {
  ModelOptions options;
  options.dtype = core::DType::f64;
  options.precision = ops::ComputePrecision::bf16;
  CHECK_THROWS_WITH(load_hf_model(testing::fixture_dir("qwen3_moe_a"), options),
                    Catch::Contains("dtype f32"));
}

}  // namespace
}  // namespace dyncp::model
