// The distributed optimizer's collectives (parallel/sharded_state_sync.hpp) against locally
// computed references, under mpirun with 1 to 4 ranks: dense state over the world, expert
// state over the ranks of equal parity (they hold the same expert ranges, as an expert-DP
// group does). Bucket sizes from one element up force many staging rounds and uneven padding.
//
// Built a second time against the emulated CUDA backend (DYNCP_SHARDED_ON_CUDA): the same checks
// with every buffer in device memory, which host code cannot read, over a RoutedComm whose
// device channel is the emulated NCCL.

#include "parallel/sharded_state_sync.hpp"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "mpi_test_world.hpp"
#ifdef DYNCP_SHARDED_ON_CUDA
#include "dist/nccl_comm.hpp"
#include "dist/routed_comm.hpp"
#include "ops/cuda/cuda_backend.hpp"
#endif

using namespace dyncp;
using parallel::ParameterRange;

namespace {

parallel::ParameterPartition make_partition(std::vector<ParameterRange> ranges) {
  parallel::ParameterPartition partition;
  partition.ranges = std::move(ranges);
  for (const ParameterRange& range : partition.ranges)
    (range.is_expert ? partition.expert_elements : partition.dense_elements) += range.count;
  return partition;
}

constexpr std::int64_t flat_size = 260;

// Small integers: every sum is exact whatever the order.
float contribution(int rank, std::int64_t i) {
  return static_cast<float>((rank + 1) * (i % 7 + 1));
}

bool in_kind(const parallel::ParameterPartition& partition, std::int64_t i, bool expert) {
  for (const ParameterRange& range : partition.ranges)
    if (range.is_expert == expert && i >= range.offset && i < range.offset + range.count)
      return true;
  return false;
}

// `values` where the sync under test reads them: a host view, or a device copy.
core::Tensor placed(std::vector<float>& values, core::Device device) {
  const core::Tensor host = core::Tensor::view_of(
      values.data(), {static_cast<std::int64_t>(values.size())}, core::DType::f32);
  if (device == core::Device::cpu) return host;
  const core::Tensor copy = core::Tensor::empty(host.shape(), core::DType::f32, device);
  copy.copy_from(host);
  return copy;
}

// Back into `values` after the sync wrote `buffer`.
void fetch(const core::Tensor& buffer, std::vector<float>& values) {
  if (buffer.device() == core::Device::cpu) return;
  core::Tensor::view_of(values.data(), buffer.shape(), core::DType::f32).copy_from(buffer);
}

void check_collectives(dist::Comm& world, const parallel::ParameterPartition& partition,
                       std::int64_t bucket, core::Device device = core::Device::cpu) {
  const int rank = world.rank();
  const std::unique_ptr<dist::Comm> same_parity = world.split(rank % 2, rank, "expert_dp");
  const int parity_ranks = same_parity->size();
  INFO("bucket " << bucket << ", rank " << rank << " of " << world.size());
  parallel::ShardedStateSync sync(
      parallel::plan_optimizer_shards(partition, world.size(), rank, parity_ranks,
                                      same_parity->rank()),
      world, *same_parity, bucket);
  const parallel::OptimizerShards& shards = sync.shards();

  // Reduce-scatter: the owned pieces hold the sums over the kind's group; nothing else of the
  // buffer outside the pieces' ranges is touched.
  std::vector<float> gradients(flat_size);
  for (std::int64_t i = 0; i < flat_size; ++i)
    gradients[static_cast<std::size_t>(i)] = contribution(rank, i);
  const auto dense_sum = [&](std::int64_t i) {
    float sum = 0;
    for (int r = 0; r < world.size(); ++r) sum += contribution(r, i);
    return sum;
  };
  const auto parity_sum = [&](int parity, std::int64_t i) {
    float sum = 0;
    for (int r = parity; r < world.size(); r += 2) sum += contribution(r, i);
    return sum;
  };
  const dist::OpCounter before = world.counters()[dist::CommOp::reduce_scatter];
  const core::Tensor gradient_buffer = placed(gradients, device);
  sync.reduce_scatter(gradient_buffer);
  fetch(gradient_buffer, gradients);
  const dist::OpCounter after = world.counters()[dist::CommOp::reduce_scatter];
  for (const ParameterRange& range : shards.owned_ranges) {
    for (std::int64_t i = range.offset; i < range.offset + range.count; ++i) {
      const float expected = range.is_expert ? parity_sum(rank % 2, i) : dense_sum(i);
      CHECK(gradients[static_cast<std::size_t>(i)] == expected);
    }
  }
  for (std::int64_t i = 0; i < flat_size; ++i) {
    if (!in_kind(partition, i, false) && !in_kind(partition, i, true))
      CHECK(gradients[static_cast<std::size_t>(i)] == contribution(rank, i));
  }
  // The Comm counters see the padded pieces: (p - 1) blocks of the largest piece sent.
  const auto p = static_cast<std::uint64_t>(world.size());
  CHECK(after.bytes_sent - before.bytes_sent ==
        (p - 1) * static_cast<std::uint64_t>(shards.dense.largest_piece()) * sizeof(float));

  // Σ g² over owned pieces, over the world: each dense element once and each element of
  // both parity groups' experts once.
  double expected_squares = 0;
  for (std::int64_t i = 0; i < flat_size; ++i) {
    if (in_kind(partition, i, false))
      expected_squares += static_cast<double>(dense_sum(i)) * dense_sum(i);
    if (in_kind(partition, i, true)) {
      for (int parity = 0; parity < std::min(2, world.size()); ++parity)
        expected_squares += static_cast<double>(parity_sum(parity, i)) * parity_sum(parity, i);
    }
  }
  CHECK(sync.global_sum_of_squares(gradient_buffer) == Approx(expected_squares).epsilon(1e-12));

  // All-gather from the flat buffer: each rank holds only its pieces; afterwards every rank
  // holds every element of its kinds' ranges. Gaps keep their value.
  const auto value = [](std::int64_t i) { return 0.5f + static_cast<float>(i); };
  std::vector<float> parameters(flat_size, -1.0f);
  for (const ParameterRange& range : shards.owned_ranges)
    for (std::int64_t i = range.offset; i < range.offset + range.count; ++i)
      parameters[static_cast<std::size_t>(i)] = value(i);
  const core::Tensor parameter_buffer = placed(parameters, device);
  sync.all_gather(parameter_buffer);
  fetch(parameter_buffer, parameters);
  for (std::int64_t i = 0; i < flat_size; ++i) {
    const bool covered = in_kind(partition, i, false) || in_kind(partition, i, true);
    CHECK(parameters[static_cast<std::size_t>(i)] == (covered ? value(i) : -1.0f));
  }

  // All-gather from a packed buffer of the owned pieces (the optimizer's moments).
  std::vector<float> packed;
  for (const ParameterRange& range : shards.owned_ranges)
    for (std::int64_t i = range.offset; i < range.offset + range.count; ++i)
      packed.push_back(value(i) * 2);
  REQUIRE(static_cast<std::int64_t>(packed.size()) == shards.owned_elements);
  std::vector<float> full(flat_size, 0.0f);
  const core::Tensor full_buffer = placed(full, device);
  sync.all_gather(full_buffer, placed(packed, device));
  fetch(full_buffer, full);
  for (std::int64_t i = 0; i < flat_size; ++i) {
    const bool covered = in_kind(partition, i, false) || in_kind(partition, i, true);
    CHECK(full[static_cast<std::size_t>(i)] == (covered ? value(i) * 2 : 0.0f));
  }
}

parallel::ParameterPartition uneven_partition() {
  return make_partition({{0, 37, false, true},
                         {40, 23, true, true},
                         {64, 5, false, false},
                         {70, 50, true, true},
                         {128, 101, false, true},
                         {232, 1, false, false},
                         {240, 17, true, true}});
}

}  // namespace

TEST_CASE("sharded collectives on uneven dense and expert ranges", "[parallel][shards]") {
  for (const std::int64_t bucket : {1, 3, 7, 64, 1 << 20})
    check_collectives(dist::testing::test_world(), uneven_partition(), bucket);
}

TEST_CASE("sharded collectives with more shards than elements", "[parallel][shards]") {
  const auto partition =
      make_partition({{0, 2, false, true}, {16, 1, true, true}, {32, 1, false, false}});
  for (const std::int64_t bucket : {1, 2, 1 << 20})
    check_collectives(dist::testing::test_world(), partition, bucket);
}

TEST_CASE("sharded collectives without expert ranges", "[parallel][shards]") {
  const auto partition = make_partition({{0, 100, false, true}, {112, 9, false, false}});
  for (const std::int64_t bucket : {5, 1 << 20})
    check_collectives(dist::testing::test_world(), partition, bucket);
}

#ifdef DYNCP_SHARDED_ON_CUDA
// The GPU path: gradients, parameters and packed moments in device memory. The emulated device
// memory faults on any host access, so passing means the pieces moved by device copies only;
// the collectives went over the device channel (the emulated NCCL), and the host channel
// carried only the Σ g² scalar.
TEST_CASE("sharded collectives on device buffers", "[parallel][shards][cuda]") {
  ops::cuda::install_backend();
  dist::install_nccl_device_comms();
  const std::unique_ptr<dist::Comm> routed =
      dist::make_routed_world(dist::testing::test_world(), 60.0);
  auto& channels = dynamic_cast<dist::RoutedComm&>(*routed);
  for (const std::int64_t bucket : {3, 64, 1 << 20}) {
    const std::uint64_t host_before = channels.host_channel().counters().total().calls;
    check_collectives(*routed, uneven_partition(), bucket, core::Device::cuda);
    // Host calls: the split's, and one all-reduce of the squares.
    const std::uint64_t host_calls = channels.host_channel().counters().total().calls - host_before;
    INFO("host channel calls " << host_calls);
    CHECK(host_calls <= 2);
  }
  const auto partition =
      make_partition({{0, 2, false, true}, {16, 1, true, true}, {32, 1, false, false}});
  check_collectives(*routed, partition, 1, core::Device::cuda);
}
#endif

TEST_CASE("sharded state refuses groups it was not planned for", "[parallel][shards]") {
  dist::Comm& world = dist::testing::test_world();
  const auto partition = make_partition({{0, 10, false, true}});
  const auto shards = parallel::plan_optimizer_shards(partition, world.size() + 1, 0, 1, 0);
  const std::unique_ptr<dist::Comm> self = world.split(world.rank(), 0, "self");
  CHECK_THROWS(parallel::ShardedStateSync(shards, world, *self));
}
