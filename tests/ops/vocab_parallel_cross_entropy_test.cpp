// The vocabulary-parallel LM head + cross-entropy (ops/vocab_parallel_cross_entropy.hpp): one
// shard {0, V} reproduces fused_cross_entropy, S shards with the caller's reductions reproduce the
// whole vocabulary, the gradients are those of the loss (finite differences in f64), and bad
// labels and shards are refused.

#include "ops/vocab_parallel_cross_entropy.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "op_test_utils.hpp"
#include "ops/cross_entropy.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

constexpr std::int64_t kTokens = 23, kHidden = 8, kVocab = 12;

Tensor u8_tensor(const std::vector<std::uint8_t>& values) {
  Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::u8);
  for (std::size_t i = 0; i < values.size(); ++i) t.data<std::uint8_t>()[i] = values[i];
  return t;
}

// Labels over the whole vocabulary (every shard holds some), two ignored, one masked out.
struct Batch {
  Tensor hidden, weight, labels, mask;
};

Batch make_batch(DType dtype, bool with_mask) {
  std::vector<std::int32_t> labels(kTokens);
  std::vector<std::uint8_t> mask(kTokens, 1);
  for (std::int64_t t = 0; t < kTokens; ++t)
    labels[t] = static_cast<std::int32_t>((t * 5) % kVocab);
  labels[4] = -100;
  labels[17] = -1;
  mask[9] = 0;
  return {random_tensor(Shape{kTokens, kHidden}, dtype, 11),
          random_tensor(Shape{kVocab, kHidden}, dtype, 12, 0.7), int_tensor(labels),
          with_mask ? u8_tensor(mask) : Tensor()};
}

bool counted(const Batch& b, std::int64_t t) {
  return b.labels.data<std::int32_t>()[t] >= 0 &&
         (!b.mask.defined() || b.mask.data<std::uint8_t>()[t] != 0);
}

struct Outcome {
  CrossEntropyResult result;
  Tensor per_token, dhidden, dweight;
};

// fused_cross_entropy on the whole vocabulary; dW starts from `dweight_start` (accumulates).
Outcome whole_vocabulary(const OpContext& ctx, const Batch& b, const Tensor& dweight_start,
                         const CrossEntropyOptions& options) {
  Outcome out{{},
              Tensor::empty(Shape{kTokens}, b.hidden.dtype()),
              Tensor::empty(b.hidden.shape(), b.hidden.dtype()),
              clone(dweight_start)};
  out.result = fused_cross_entropy(ctx, b.hidden, b.weight, b.labels, b.mask, out.per_token,
                                   out.dhidden, out.dweight, options);
  return out;
}

// The three steps over `shards` equal shards with the TP reductions done here: shard_lse gathered
// in rank order, target_logit summed, dhidden summed, dW written into the shard's rows of one
// whole tensor (without_grad: step 3 forward only). Every shard's loss and per-token loss must
// agree; shard 0's are returned.
Outcome sharded(const OpContext& ctx, const Batch& b, int shards, const Tensor& dweight_start,
                const CrossEntropyOptions& options, bool with_grad = true) {
  const DType dtype = b.hidden.dtype();
  const std::int64_t rows = kVocab / shards;
  const Tensor shard_lses = Tensor::empty(Shape{shards, kTokens}, dtype);
  const Tensor targets = Tensor::empty(Shape{shards, kTokens}, dtype);
  for (int s = 0; s < shards; ++s) {
    vocab_shard_logsumexp(ctx, b.hidden, b.weight.slice(s * rows, (s + 1) * rows),
                          {s * rows, kVocab}, b.labels, b.mask, shard_lses.select(s),
                          targets.select(s), options);
  }
  const Tensor target = Tensor::zeros(Shape{kTokens}, dtype);
  for (int s = 0; s < shards; ++s) {
    for (std::int64_t t = 0; t < kTokens; ++t) {
      const double part = element(targets, s * kTokens + t);
      // One shard holds each label: the others contribute exact zeros.
      const std::int64_t label = b.labels.data<std::int32_t>()[t];
      if (!counted(b, t) || label / rows != s) CHECK(part == 0.0);
      set_element(target, t, element(target, t) + part);
    }
  }
  const Tensor lse = Tensor::empty(Shape{kTokens}, dtype);
  combine_shard_logsumexp(ctx, shard_lses, lse);

  Outcome out{{},
              Tensor::empty(Shape{kTokens}, dtype),
              Tensor::zeros(b.hidden.shape(), dtype),
              clone(dweight_start)};
  const Tensor dhidden_shard = Tensor::empty(b.hidden.shape(), dtype);
  const Tensor per_token_shard = Tensor::empty(Shape{kTokens}, dtype);
  for (int s = 0; s < shards; ++s) {
    const CrossEntropyResult result = vocab_shard_cross_entropy(
        ctx, b.hidden, b.weight.slice(s * rows, (s + 1) * rows), {s * rows, kVocab}, b.labels,
        b.mask, lse, target, per_token_shard, with_grad ? dhidden_shard : Tensor(),
        with_grad ? out.dweight.slice(s * rows, (s + 1) * rows) : Tensor(), options);
    if (s == 0) {
      out.result = result;
      out.per_token.copy_from(per_token_shard);
    } else {
      CHECK(result.loss_sum == out.result.loss_sum);
      CHECK(result.num_loss_tokens == out.result.num_loss_tokens);
      require_close(per_token_shard, out.per_token, 0, 0, "per-token loss of every shard");
    }
    if (!with_grad) continue;
    for (std::int64_t i = 0; i < dhidden_shard.numel(); ++i)
      set_element(out.dhidden, i, element(out.dhidden, i) + element(dhidden_shard, i));
  }
  return out;
}

void require_outcomes_close(const Outcome& got, const Outcome& want, double rtol, double atol) {
  CHECK(got.result.num_loss_tokens == want.result.num_loss_tokens);
  CHECK(got.result.loss_sum == Approx(want.result.loss_sum).epsilon(rtol).margin(atol));
  require_close(got.per_token, want.per_token, rtol, atol, "per-token loss");
  require_close(got.dhidden, want.dhidden, rtol, atol, "dhidden");
  require_close(got.dweight, want.dweight, rtol, atol, "dlm_weight");
}

}  // namespace

TEST_CASE("one vocabulary shard reproduces fused_cross_entropy",
          "[ops][cross_entropy][vocab_parallel]") {
  dyncp::core::Arena scratch("vocab shard ce", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  ctx.precision = GENERATE(ComputePrecision::fp32, ComputePrecision::bf16);
  const bool with_mask = GENERATE(false, true);
  const std::int64_t token_chunk = GENERATE(1, 4, 64), vocab_chunk = GENERATE(5, 12, 1000);
  const CrossEntropyOptions options{token_chunk, vocab_chunk, 0.5};
  const Batch b = make_batch(DType::f32, with_mask);
  const Tensor dweight_start = random_tensor(b.weight.shape(), DType::f32, 13, 0.1);
  const Outcome want = whole_vocabulary(ctx, b, dweight_start, options);
  const Outcome got = sharded(ctx, b, 1, dweight_start, options);
  CHECK(want.result.num_loss_tokens == (with_mask ? 20 : 21));
  // Step 1 is fused_cross_entropy's first pass and the lse of one shard passes step 2
  // unchanged, so the loss is bitwise the same; the gradients too where fused_cross_entropy
  // also recomputes its tiles, else they differ in the rounding of the softmax.
  CHECK(got.result.loss_sum == want.result.loss_sum);
  require_close(got.per_token, want.per_token, 0, 0, "per-token loss");
  if (vocab_chunk < kVocab) {
    require_outcomes_close(got, want, 0, 0);
  } else {
    require_outcomes_close(got, want, 1e-5, 1e-6);
  }
  for (std::int64_t t = 0; t < kTokens; ++t) {
    if (counted(b, t)) continue;
    CHECK(element(got.per_token, t) == 0.0);
    for (std::int64_t j = 0; j < kHidden; ++j) CHECK(element(got.dhidden, t * kHidden + j) == 0.0);
  }
  CHECK(scratch.bytes_in_use() == 0);
}

TEST_CASE("vocabulary shards summed and concatenated reproduce the whole vocabulary",
          "[ops][cross_entropy][vocab_parallel]") {
  dyncp::core::Arena scratch("vocab shard ce", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const int shards = GENERATE(2, 3);
  const bool with_mask = GENERATE(false, true);
  const std::int64_t vocab_chunk = GENERATE(3, 1000);
  const CrossEntropyOptions options{5, vocab_chunk, 0.25};
  SECTION("f64: to double round-off") {
    const Batch b = make_batch(DType::f64, with_mask);
    const Tensor dweight_start = random_tensor(b.weight.shape(), DType::f64, 14, 0.1);
    require_outcomes_close(sharded(ctx, b, shards, dweight_start, options),
                           whole_vocabulary(ctx, b, dweight_start, options), 1e-12, 1e-14);
  }
  SECTION("f32, fp32 and bf16 products: to fp32 round-off") {
    ctx.precision = GENERATE(ComputePrecision::fp32, ComputePrecision::bf16);
    const Batch b = make_batch(DType::f32, with_mask);
    const Tensor dweight_start = random_tensor(b.weight.shape(), DType::f32, 14, 0.1);
    require_outcomes_close(sharded(ctx, b, shards, dweight_start, options),
                           whole_vocabulary(ctx, b, dweight_start, options), 2e-6, 1e-6);
  }
  CHECK(scratch.bytes_in_use() == 0);
}

TEST_CASE("vocabulary-shard gradients match finite differences of the sharded loss",
          "[ops][cross_entropy][vocab_parallel][fd]") {
  dyncp::core::Arena scratch("vocab shard ce", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const int shards = GENERATE(1, 2, 3);
  const CrossEntropyOptions options{4, 3, 0.5};
  const Batch b = make_batch(DType::f64, true);
  const Tensor zero_dw = Tensor::zeros(b.weight.shape(), DType::f64);
  const Outcome analytic = sharded(ctx, b, shards, zero_dw, options);
  // The loss through all three steps (and the caller's reductions), times grad_scale.
  const auto loss = [&] {
    return 0.5 * sharded(ctx, b, shards, zero_dw, options, /*with_grad=*/false).result.loss_sum;
  };
  CHECK(finite_difference_error(b.hidden, analytic.dhidden, loss) < kFdTolerance);
  CHECK(finite_difference_error(b.weight, analytic.dweight, loss) < kFdTolerance);
}

TEST_CASE("combine_shard_logsumexp is log-sum-exp over the shards in rank order",
          "[ops][cross_entropy][vocab_parallel]") {
  const OpContext ctx;
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor parts = Tensor::empty(Shape{3, 4}, DType::f64);
  const std::vector<double> values{0.5,  -inf, 1000.0,  2.0,   // shard 0
                                   -1.0, -inf, 999.0,   2.0,   // shard 1
                                   3.0,  -inf, -1000.0, 2.0};  // shard 2
  for (std::size_t i = 0; i < values.size(); ++i)
    set_element(parts, static_cast<std::int64_t>(i), values[i]);
  const Tensor lse = Tensor::empty(Shape{4}, DType::f64);
  combine_shard_logsumexp(ctx, parts, lse);
  CHECK(element(lse, 0) == Approx(std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(3.0))));
  CHECK(element(lse, 1) == -inf);  // no shard has any mass
  // Shifted by the maximum: no overflow at 1000.
  CHECK(element(lse, 2) == Approx(1000.0 + std::log(1.0 + std::exp(-1.0))).epsilon(1e-15));
  CHECK(element(lse, 3) == Approx(2.0 + std::log(3.0)).epsilon(1e-15));
  // One shard: the identity, bit for bit (so one shard reproduces the whole-vocabulary lse).
  const Tensor one = random_tensor(Shape{1, 9}, DType::f32, 15, 5.0);
  const Tensor same = Tensor::empty(Shape{9}, DType::f32);
  combine_shard_logsumexp(ctx, one, same);
  require_close(same, one, 0, 0, "one shard's lse");
  CHECK_THROWS_WITH(combine_shard_logsumexp(ctx, parts, Tensor::empty(Shape{3}, DType::f64)),
                    Catch::Contains("combine_shard_logsumexp") && Catch::Contains("lse"));
}

TEST_CASE("vocabulary-shard cross-entropy refuses labels past the vocabulary and bad shards",
          "[ops][cross_entropy][vocab_parallel]") {
  dyncp::core::Arena scratch("vocab shard ce", 1 << 16);
  OpContext ctx;
  ctx.scratch = &scratch;
  const Batch b = make_batch(DType::f32, false);
  const Tensor half = b.weight.slice(0, kVocab / 2);
  const Tensor lse = Tensor::empty(Shape{kTokens}, DType::f32),
               target = Tensor::empty(Shape{kTokens}, DType::f32);
  std::vector<std::int32_t> bad(kTokens, 1);
  bad[7] = static_cast<std::int32_t>(kVocab);  // past the whole vocabulary, held by no shard
  const Tensor bad_labels = int_tensor(bad);
  const auto expect_data_error = [](const auto& call, const char* op) {
    try {
      call();
      FAIL("expected a data error");
    } catch (const dyncp::core::Error& error) {
      CHECK(error.exit_code() == 2);
      CHECK_THAT(error.what(),
                 Catch::Contains("token 7") && Catch::Contains("12") && Catch::Contains(op));
    }
  };
  expect_data_error(
      [&] {
        vocab_shard_logsumexp(ctx, b.hidden, half, {0, kVocab}, bad_labels, Tensor(), lse, target);
      },
      "vocab_shard_logsumexp");
  expect_data_error(
      [&] {
        vocab_shard_cross_entropy(ctx, b.hidden, half, {0, kVocab}, bad_labels, Tensor(), lse,
                                  target, Tensor(), Tensor(), Tensor());
      },
      "vocab_shard_cross_entropy");
  // A label on another shard is no error: this shard's target is 0 for it.
  std::vector<std::int32_t> elsewhere(kTokens, static_cast<std::int32_t>(kVocab - 1));
  vocab_shard_logsumexp(ctx, b.hidden, half, {0, kVocab}, int_tensor(elsewhere), Tensor(), lse,
                        target);
  for (std::int64_t t = 0; t < kTokens; ++t) CHECK(element(target, t) == 0.0);
  // The shard must lie inside the vocabulary.
  CHECK_THROWS_WITH(vocab_shard_logsumexp(ctx, b.hidden, half, {kVocab / 2 + 1, kVocab}, b.labels,
                                          Tensor(), lse, target),
                    Catch::Contains("vocab_shard_logsumexp") && Catch::Contains("shard"));
  CHECK_THROWS_WITH(
      vocab_shard_logsumexp(ctx, b.hidden, half, {-1, kVocab}, b.labels, Tensor(), lse, target),
      Catch::Contains("shard"));
  OpContext no_scratch;
  CHECK_THROWS_WITH(vocab_shard_logsumexp(no_scratch, b.hidden, half, {0, kVocab}, b.labels,
                                          Tensor(), lse, target),
                    Catch::Contains("scratch"));
  // Forward only needs no vocab product, hence no scratch.
  const auto result =
      vocab_shard_cross_entropy(no_scratch, b.hidden, half, {0, kVocab}, b.labels, Tensor(), lse,
                                target, Tensor(), Tensor(), Tensor());
  CHECK(result.num_loss_tokens == 21);
}
