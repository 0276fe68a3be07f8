// The overlapped reductions' and gather's planning and bookkeeping, without communication
// (parallel/overlapped_gradient_reduce.hpp, overlapped_parameter_gather.hpp,
// communication_thread.hpp): spans cut where the distributed optimizer's pieces change hands
// belong to their owners and still cover every element once, the gather takes the buckets in
// the forward's order and its waits follow the layers, and the communication thread runs its
// tasks in order and reports a failure once.

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <vector>

#include "dist/self_comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "parallel/communication_thread.hpp"
#include "parallel/optimizer_shards.hpp"
#include "parallel/overlapped_gradient_reduce.hpp"
#include "parallel/overlapped_parameter_gather.hpp"
#include "parallel/parameter_partition.hpp"

using namespace dyncp;

namespace {

config::ModelArchitecture tiny_moe() {
  config::ModelArchitecture a;
  a.model_type = "qwen3_moe";
  a.vocab_size = 96;
  a.hidden_size = 32;
  a.intermediate_size = 40;
  a.num_hidden_layers = 3;
  a.num_attention_heads = 4;
  a.num_key_value_heads = 2;
  a.head_dim = 8;
  a.num_experts = 4;
  a.num_experts_per_tok = 2;
  a.moe_intermediate_size = 12;
  a.mlp_only_layers = {0};
  a.rope_theta = 10000.0;
  a.resolve();
  return a;
}

// 1 for each flat element a tensor holds, 0 in the alignment gaps between them.
std::vector<int> tensor_elements(const model::Qwen3MoeParameters& parameters, std::int64_t n) {
  std::vector<int> held(static_cast<std::size_t>(n), 0);
  const auto* base = static_cast<const float*>(parameters.all_grads().raw_data());
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    const auto offset =
        static_cast<std::int64_t>(static_cast<const float*>(tensor.grad.raw_data()) - base);
    for (std::int64_t i = offset; i < offset + tensor.grad.numel(); ++i)
      held[static_cast<std::size_t>(i)] = 1;
  }
  return held;
}

// How often each flat element appears in the buckets' spans.
std::vector<int> coverage(const std::vector<parallel::GradientBucket>& buckets, std::int64_t n) {
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (const auto& bucket : buckets)
    for (const auto& span : bucket.spans)
      for (std::int64_t i = span.offset; i < span.offset + span.count; ++i)
        ++seen[static_cast<std::size_t>(i)];
  return seen;
}

}  // namespace

TEST_CASE("owner runs cut a flat span where the pieces change hands", "[parallel][overlap]") {
  // Two adjacent ranges (37 + 20 elements) and one further on: 87 logical elements over 4
  // shards of 22, 22, 22, 21.
  const parallel::KindShards kind(
      {{0, 37, false, true}, {37, 20, false, false}, {100, 30, false, true}}, 4, 0);
  for (std::int64_t logical = 0; logical < kind.total(); ++logical) {
    const int owner = kind.owner_of(logical);
    CHECK(kind.piece(owner).begin <= logical);
    CHECK(logical < kind.piece(owner).end);
  }
  std::vector<std::int64_t> offsets, counts;
  std::vector<int> owners;
  kind.for_each_owner_run(10, 47, [&](std::int64_t offset, std::int64_t count, int owner) {
    offsets.push_back(offset);
    counts.push_back(count);
    owners.push_back(owner);
  });
  // Logical 10..56: piece 0 to 21, piece 1 to 43, piece 2 from 44.
  CHECK(offsets == std::vector<std::int64_t>{10, 22, 44});
  CHECK(counts == std::vector<std::int64_t>{12, 22, 13});
  CHECK(owners == std::vector<int>{0, 1, 2});
  // The third range: flat 100.. is logical 57.., in piece 2 (44..65) then piece 3.
  owners.clear();
  counts.clear();
  kind.for_each_owner_run(100, 30, [&](std::int64_t, std::int64_t count, int owner) {
    counts.push_back(count);
    owners.push_back(owner);
  });
  CHECK(owners == std::vector<int>{2, 3});
  CHECK(counts == std::vector<std::int64_t>{9, 21});
  CHECK_THROWS(kind.for_each_owner_run(60, 1, [](std::int64_t, std::int64_t, int) {}));
}

TEST_CASE(
    "buckets cut at the optimizer's owners keep every element once, in the backward's "
    "order",
    "[parallel][overlap]") {
  const model::Qwen3MoeParameters parameters(tiny_moe());
  const parallel::ParameterPartition partition = parallel::partition_parameters(parameters);
  const std::int64_t n = parameters.all_grads().numel();
  const std::vector<int> held = tensor_elements(parameters, n);
  for (const std::int64_t bucket_elements : {std::int64_t{64}, std::int64_t{1000}, n}) {
    INFO(bucket_elements << " elements per bucket");
    const auto plain = parallel::plan_gradient_buckets(parameters, bucket_elements);
    CHECK(coverage(plain, n) == held);
    for (const auto& bucket : plain)
      for (const auto& span : bucket.spans) CHECK(span.owner == -1);
    const parallel::OptimizerShards shards = parallel::plan_optimizer_shards(partition, 3, 0, 2, 0);
    const auto cut = parallel::plan_gradient_buckets(parameters, bucket_elements, &shards);
    REQUIRE(cut.size() == plain.size());
    CHECK(coverage(cut, n) == held);
    for (std::size_t b = 0; b < cut.size(); ++b) {
      CHECK(cut[b].is_expert == plain[b].is_expert);
      CHECK(cut[b].ready_after_layer == plain[b].ready_after_layer);
      if (b > 0) CHECK(cut[b - 1].ready_after_layer >= cut[b].ready_after_layer);
      const parallel::KindShards& kind = cut[b].is_expert ? shards.expert : shards.dense;
      std::int64_t elements = 0;
      for (const auto& span : cut[b].spans) {
        // One owner for the whole part: the owners of its first and last elements.
        std::vector<int> seen;
        kind.for_each_owner_run(
            span.offset, span.count,
            [&](std::int64_t, std::int64_t, int owner) { seen.push_back(owner); });
        CHECK(seen == std::vector<int>{span.owner});
        elements += span.count;
      }
      CHECK(elements == cut[b].elements);
    }
  }
}

TEST_CASE("the parameter gather waits layer by layer in the forward's order",
          "[parallel][overlap]") {
  const model::Qwen3MoeParameters parameters(tiny_moe());
  const parallel::ParameterPartition partition = parallel::partition_parameters(parameters);
  const auto pool = dist::make_self_comm("pool");
  const auto expert_data_parallel = dist::make_self_comm("expert_dp");
  const parallel::OptimizerShards shards = parallel::plan_optimizer_shards(partition, 1, 0, 1, 0);
  parallel::OverlappedParameterGather gather(parameters, shards, *pool, *expert_data_parallel, 64);
  const auto& buckets = gather.buckets();
  REQUIRE(buckets.size() > 3);
  CHECK(buckets.front().ready_after_layer == -1);  // the embedding's first
  CHECK(buckets.back().ready_after_layer == 3);    // the final norm and head's last
  for (std::size_t b = 1; b < buckets.size(); ++b)
    CHECK(buckets[b - 1].ready_after_layer <= buckets[b].ready_after_layer);
  CHECK_FALSE(gather.pending());
  for (int step = 0; step < 2; ++step) {
    gather.start();
    CHECK(gather.pending());
    CHECK_THROWS_WITH(gather.start(), Catch::Contains("waited for before the next starts"));
    std::int64_t expected = 0;
    for (std::int64_t layer = -1; layer <= 3; ++layer) {
      gather.wait_for_layer(layer);
      expected += std::count_if(buckets.begin(), buckets.end(), [&](const auto& bucket) {
        return bucket.ready_after_layer == layer;
      });
      CHECK(gather.waited_by_layer() == expected);
    }
    CHECK_FALSE(gather.pending());
  }
  // A reader outside the forward: everything at once, none of it by layer.
  gather.start();
  gather.wait_all();
  CHECK_FALSE(gather.pending());
  CHECK(gather.waited_by_layer() == 0);
}

TEST_CASE("the communication thread runs its tasks in order and reports a failure once",
          "[parallel][overlap]") {
  parallel::CommunicationThread thread;
  std::vector<int> order;
  std::atomic<int> ran{0};
  const std::uint64_t first = thread.post([&] { order.push_back(1), ++ran; });
  const std::uint64_t second = thread.post([&] { order.push_back(2), ++ran; });
  CHECK(second == first + 1);
  thread.wait_until(second);
  CHECK(order == std::vector<int>{1, 2});
  thread.post([] { throw std::runtime_error("a collective failed"); });
  const std::uint64_t skipped = thread.post([&] { ++ran; });
  CHECK_THROWS_WITH(thread.wait_all(), Catch::Contains("a collective failed"));
  thread.wait_until(skipped);  // reported once; the task after it did not run
  CHECK(ran == 2);
  CHECK(thread.finished() == skipped);
}
