// Fused chunked cross-entropy, AdamW and gradient norms.

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "op_test_utils.hpp"
#include "ops/adamw.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/gemm.hpp"
#include "ops/grad_norm.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

// Unchunked reference: full logits, log-softmax, NLL sum over counted rows.
double reference_loss(const Tensor& hidden, const Tensor& weight,
                      const std::vector<std::int32_t>& labels,
                      const std::vector<std::uint8_t>& mask) {
  const OpContext ctx;
  const Tensor logits = Tensor::empty(Shape{hidden.size(0), weight.size(0)}, hidden.dtype());
  linear_forward(ctx, hidden, weight, logits);
  double total = 0;
  const std::int64_t vocab = weight.size(0);
  for (std::int64_t t = 0; t < hidden.size(0); ++t) {
    if (labels[static_cast<std::size_t>(t)] < 0 || mask[static_cast<std::size_t>(t)] == 0) continue;
    double m = -INFINITY;
    for (std::int64_t v = 0; v < vocab; ++v) m = std::max(m, element(logits, t * vocab + v));
    double s = 0;
    for (std::int64_t v = 0; v < vocab; ++v) s += std::exp(element(logits, t * vocab + v) - m);
    total += m + std::log(s) - element(logits, t * vocab + labels[static_cast<std::size_t>(t)]);
  }
  return total;
}

Tensor u8_tensor(const std::vector<std::uint8_t>& values) {
  Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::u8);
  for (std::size_t i = 0; i < values.size(); ++i) t.data<std::uint8_t>()[i] = values[i];
  return t;
}

}  // namespace

TEST_CASE("chunked cross-entropy equals the unchunked loss and finite differences",
          "[ops][cross_entropy][fd]") {
  dyncp::core::Arena scratch("ce", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const std::int64_t token_chunk = GENERATE(1, 3, 64), vocab_chunk = GENERATE(1, 7, 1000);
  const std::int64_t tokens = 11, hidden_size = 4, vocab = 13;
  const Tensor hidden = random_tensor(Shape{tokens, hidden_size}, DType::f64, 1);
  const Tensor weight = random_tensor(Shape{vocab, hidden_size}, DType::f64, 2);
  const std::vector<std::int32_t> labels{3, -100, 12, 0, 5, 5, 7, 1, 2, 9, 11};
  const std::vector<std::uint8_t> mask{1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1};
  const Tensor per_token = Tensor::empty(Shape{tokens}, DType::f64);
  const Tensor dhidden = Tensor::empty(hidden.shape(), DType::f64);
  const Tensor dweight = Tensor::zeros(weight.shape(), DType::f64);
  const CrossEntropyOptions options{token_chunk, vocab_chunk, 1.0};
  const Tensor label_tensor = int_tensor(labels), mask_tensor = u8_tensor(mask);
  const CrossEntropyResult result = fused_cross_entropy(
      ctx, hidden, weight, label_tensor, mask_tensor, per_token, dhidden, dweight, options);
  CHECK(result.num_loss_tokens == 8);
  CHECK(result.loss_sum == Approx(reference_loss(hidden, weight, labels, mask)).epsilon(1e-12));
  double per_token_sum = 0;
  for (std::int64_t t = 0; t < tokens; ++t) per_token_sum += element(per_token, t);
  CHECK(per_token_sum == Approx(result.loss_sum).epsilon(1e-12));
  CHECK(element(per_token, 1) == 0.0);
  for (std::int64_t j = 0; j < hidden_size; ++j)
    CHECK(element(dhidden, 3 * hidden_size + j) == 0.0);
  auto loss = [&] {
    return fused_cross_entropy(ctx, hidden, weight, label_tensor, mask_tensor, Tensor(), Tensor(),
                               Tensor(), options)
        .loss_sum;
  };
  CHECK(finite_difference_error(hidden, dhidden, loss) < kFdTolerance);
  CHECK(finite_difference_error(weight, dweight, loss) < kFdTolerance);
  CHECK(scratch.bytes_in_use() == 0);
}

TEST_CASE("cross-entropy in f32 agrees with f64 and rejects labels past the vocabulary",
          "[ops][cross_entropy]") {
  dyncp::core::Arena scratch("ce", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const Tensor hidden = random_tensor(Shape{5, 8}, DType::f32, 3);
  const Tensor weight = random_tensor(Shape{50, 8}, DType::f32, 4, 0.2);
  const Tensor labels = int_tensor({1, 2, 49, 0, 7});
  const auto result = fused_cross_entropy(ctx, hidden, weight, labels, Tensor(), Tensor(), Tensor(),
                                          Tensor(), CrossEntropyOptions{2, 16, 1.0});
  const Tensor hidden64 = Tensor::empty(hidden.shape(), DType::f64),
               weight64 = Tensor::empty(weight.shape(), DType::f64);
  for (std::int64_t i = 0; i < hidden.numel(); ++i) set_element(hidden64, i, element(hidden, i));
  for (std::int64_t i = 0; i < weight.numel(); ++i) set_element(weight64, i, element(weight, i));
  CHECK(
      result.loss_sum ==
      Approx(reference_loss(hidden64, weight64, {1, 2, 49, 0, 7}, {1, 1, 1, 1, 1})).epsilon(1e-5));
  // f32 single-pass (whole vocabulary in one tile) and two-pass chunking agree, gradients too.
  const Tensor dh_one = Tensor::empty(hidden.shape(), DType::f32),
               dh_two = Tensor::empty(hidden.shape(), DType::f32);
  const Tensor dw_one = Tensor::zeros(weight.shape(), DType::f32),
               dw_two = Tensor::zeros(weight.shape(), DType::f32);
  const auto one = fused_cross_entropy(ctx, hidden, weight, labels, Tensor(), Tensor(), dh_one,
                                       dw_one, CrossEntropyOptions{4, 4096, 1.0});
  const auto two = fused_cross_entropy(ctx, hidden, weight, labels, Tensor(), Tensor(), dh_two,
                                       dw_two, CrossEntropyOptions{3, 7, 1.0});
  CHECK(one.loss_sum == Approx(two.loss_sum).epsilon(1e-6));
  require_close(dh_one, dh_two, 1e-5, 1e-6, "dhidden");
  require_close(dw_one, dw_two, 1e-5, 1e-6, "dlm_weight");
  const Tensor bad = int_tensor({1, 2, 50, 0, 7});
  try {
    fused_cross_entropy(ctx, hidden, weight, bad, Tensor(), Tensor(), Tensor(), Tensor());
    FAIL("expected a data error");
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    CHECK_THAT(error.what(), Catch::Contains("token 2") && Catch::Contains("50"));
  }
  OpContext no_scratch;
  CHECK_THROWS_WITH(fused_cross_entropy(no_scratch, hidden, weight, labels, Tensor(), Tensor(),
                                        Tensor(), Tensor()),
                    Catch::Contains("scratch"));
}

TEST_CASE("AdamW matches a hand-computed step", "[ops][adamw]") {
  const OpContext ctx;
  const bool decay = GENERATE(false, true);
  const Tensor param = Tensor::empty(Shape{2}, DType::f64),
               grad = Tensor::empty(Shape{2}, DType::f64);
  const Tensor m = Tensor::empty(Shape{2}, DType::f64), v = Tensor::empty(Shape{2}, DType::f64);
  set_element(param, 0, 1.0);
  set_element(param, 1, -2.0);
  set_element(grad, 0, 0.5);
  set_element(grad, 1, -4.0);
  set_element(m, 0, 0.1);
  set_element(m, 1, 0.0);
  set_element(v, 0, 0.01);
  set_element(v, 1, 0.0);
  AdamWParams params;
  params.lr = 0.1;
  params.beta1 = 0.9;
  params.beta2 = 0.99;
  params.eps = 1e-8;
  params.weight_decay = 0.5;
  params.step = 2;
  params.grad_scale = 0.5;  // g = [0.25, -2]
  adamw_step(ctx, param, grad, m, v, params, decay);
  // Element 0 by hand: p = 1 − 0.1·0.5·1 (decay) = 0.95; m = 0.09 + 0.025 = 0.115;
  // v = 0.0099 + 0.000625 = 0.010525; m̂ = 0.115 / 0.19; v̂ = 0.010525 / 0.0199.
  const double p0 =
      (decay ? 0.95 : 1.0) - 0.1 * (0.115 / 0.19) / (std::sqrt(0.010525 / 0.0199) + 1e-8);
  CHECK(element(m, 0) == Approx(0.115).epsilon(1e-14));
  CHECK(element(v, 0) == Approx(0.010525).epsilon(1e-14));
  CHECK(element(param, 0) == Approx(p0).epsilon(1e-13));
  // Element 1: m = 0.1 · −2 = −0.2, v = 0.01 · 4 = 0.04.
  const double p1 =
      (decay ? -2.0 + 0.1 : -2.0) - 0.1 * (-0.2 / 0.19) / (std::sqrt(0.04 / 0.0199) + 1e-8);
  CHECK(element(param, 1) == Approx(p1).epsilon(1e-13));
}

TEST_CASE("grad norm and clip coefficient", "[ops][grad_norm]") {
  const OpContext ctx;
  const Tensor a = Tensor::empty(Shape{2}, DType::f32), b = Tensor::empty(Shape{1, 1}, DType::f64);
  a.data<float>()[0] = 3;
  a.data<float>()[1] = 0;
  b.data<double>()[0] = 4;
  const Tensor grads[] = {a, b};
  CHECK(local_grad_norm(ctx, grads) == Approx(5.0));
  CHECK(clip_coefficient(5.0, 10.0) == 1.0);
  CHECK(clip_coefficient(5.0, 0.0) == 1.0);
  CHECK(clip_coefficient(5.0, 1.0) == Approx(1.0 / (5.0 + 1e-6)));
}
