// The vocabulary-parallel embedding (embedding_shard_forward / _backward): the shards' outputs
// sum to the whole lookup, each shard's gradient is its rows of the whole gradient, padding_idx
// is a whole-vocabulary id, and ids outside the vocabulary are refused on every shard.

#include <vector>

#include "core/error.hpp"
#include "op_test_utils.hpp"
#include "ops/embedding.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

constexpr std::int64_t kVocab = 12, kHidden = 5;

// Repeated ids (the backward must sum them), ids on every shard, the first and the last id.
const std::vector<std::int32_t> kIds{3, 0, 11, 3, 7, 4, 8, 3, 5, 11, 6, 2, 9};

}  // namespace

TEST_CASE("embedding shards sum to the whole lookup and their gradients are its rows",
          "[ops][embedding][vocab_parallel]") {
  const OpContext ctx;
  const int shards = GENERATE(1, 2, 3);
  const DType dtype = GENERATE(DType::f32, DType::f64);
  const std::int64_t rows = kVocab / shards, tokens = static_cast<std::int64_t>(kIds.size());
  const Tensor table = random_tensor(Shape{kVocab, kHidden}, dtype, 21);
  const Tensor ids = int_tensor(kIds);
  const Tensor whole = Tensor::empty(Shape{tokens, kHidden}, dtype);
  embedding_forward(ctx, ids, table, whole);
  const Tensor summed = Tensor::zeros(whole.shape(), dtype);
  const Tensor part = random_tensor(whole.shape(), dtype, 22);  // garbage: every row is written
  for (int s = 0; s < shards; ++s) {
    embedding_shard_forward(ctx, ids, table.slice(s * rows, (s + 1) * rows), {s * rows, kVocab},
                            part);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const bool here = kIds[t] / rows == s;
      for (std::int64_t j = 0; j < kHidden; ++j) {
        const double value = element(part, t * kHidden + j);
        if (!here) CHECK(value == 0.0);  // an id of another shard gives a zero row
        set_element(summed, t * kHidden + j, element(summed, t * kHidden + j) + value);
      }
    }
  }
  require_close(summed, whole, 0, 0, "sum of the shards' lookups");

  // Backward: each shard's dtable (accumulating onto a start value) is its rows of the whole one.
  const std::int64_t padding_idx = GENERATE(-1, 3, 11);
  const Tensor dout = random_tensor(whole.shape(), dtype, 23);
  const Tensor start = random_tensor(table.shape(), dtype, 24);
  const Tensor whole_grad = clone(start);
  embedding_backward(ctx, ids, dout, whole_grad, padding_idx);
  const Tensor sharded_grad = clone(start);
  for (int s = 0; s < shards; ++s) {
    embedding_shard_backward(ctx, ids, dout, sharded_grad.slice(s * rows, (s + 1) * rows),
                             {s * rows, kVocab}, padding_idx);
  }
  require_close(sharded_grad, whole_grad, 0, 0, "shards' dtable rows");
  if (padding_idx >= 0) {  // the padding row (on whichever shard holds it) got nothing
    for (std::int64_t j = 0; j < kHidden; ++j) {
      CHECK(element(sharded_grad, padding_idx * kHidden + j) ==
            element(start, padding_idx * kHidden + j));
    }
  } else {  // without padding the repeated id 3 gets its three rows
    double expected = element(start, 3 * kHidden);
    for (const std::int64_t t : {0, 3, 7}) expected += element(dout, t * kHidden);
    CHECK(element(sharded_grad, 3 * kHidden) == Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("embedding shards refuse ids outside the vocabulary and shards outside it",
          "[ops][embedding][vocab_parallel]") {
  const OpContext ctx;
  const Tensor table = random_tensor(Shape{kVocab / 2, kHidden}, DType::f32, 25);
  const Tensor out = Tensor::empty(Shape{4, kHidden}, DType::f32);
  const Tensor dtable = Tensor::zeros(table.shape(), DType::f32);
  const VocabShardRange second_half{kVocab / 2, kVocab};
  for (const std::int32_t bad_id : {static_cast<std::int32_t>(kVocab), -1}) {
    const Tensor bad = int_tensor({1, 7, bad_id, 2});
    try {
      embedding_shard_forward(ctx, bad, table, second_half, out);
      FAIL("expected a data error");
    } catch (const dyncp::core::Error& error) {
      CHECK(error.exit_code() == 2);
      CHECK_THAT(error.what(), Catch::Contains("token 2") &&
                                   Catch::Contains(std::to_string(bad_id)) &&
                                   Catch::Contains("embedding_shard_forward"));
    }
    CHECK_THROWS_WITH(embedding_shard_backward(ctx, bad, out, dtable, second_half),
                      Catch::Contains("token 2"));
  }
  // Ids of the other half are fine (zero rows); a shard past the vocabulary is not.
  embedding_shard_forward(ctx, int_tensor({0, 1, 2, 3}), table, second_half, out);
  for (std::int64_t i = 0; i < out.numel(); ++i) CHECK(element(out, i) == 0.0);
  CHECK_THROWS_WITH(
      embedding_shard_forward(ctx, int_tensor({0, 1, 2, 3}), table, {kVocab / 2 + 1, kVocab}, out),
      Catch::Contains("embedding_shard_forward") && Catch::Contains("shard"));
  CHECK_THROWS_WITH(
      embedding_shard_backward(ctx, int_tensor({0, 1, 2, 3}), out, dtable, {0, kVocab / 2 - 1}),
      Catch::Contains("embedding_shard_backward") && Catch::Contains("shard"));
}
