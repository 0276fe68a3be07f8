// The ring (cp_comm_type p2p) against the all-gather CP attention on the same group and the
// same shards: out, lse, dQ, dK and dV agree to fp32 round-off, and both move the same bytes.
// Run under mpirun (2 and 4 ranks); every group the world splits into is tested: the whole
// world, pairs, and single ranks (the local path).
//
// Bins mix sequence lengths: long ones (several 64-row attention tiles per rank), a sequence of
// padded length 2c (one row per zigzag chunk: a short sample padded up to the group's
// chunking), an empty one, and a contiguous (non-zigzag) split in which rank 0's queries see
// no key of any later rank, so the ring skips whole blocks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "core/rng.hpp"
#include "dist/comm.hpp"
#include "mpi_test_world.hpp"
#include "parallel/cp_attention.hpp"
#include "parallel/cp_ring_attention.hpp"

namespace dyncp::parallel {
namespace {

using core::DType;
using core::Tensor;

constexpr std::int64_t kQueryHeads = 4;
constexpr std::int64_t kKvHeads = 2;
constexpr std::int64_t kHeadDim = 8;

// This rank's rows of every sequence: zigzag chunks r and 2c-1-r, or the contiguous r-th c-th.
struct HostLayout {
  std::vector<std::int32_t> cu{0};
  std::vector<std::int32_t> positions;
};

HostLayout shard(const std::vector<std::int32_t>& lengths, int ranks, int rank, bool zigzag) {
  HostLayout layout;
  for (const std::int32_t length : lengths) {
    REQUIRE(length % (2 * ranks) == 0);
    if (zigzag) {
      const std::int32_t chunk = length / (2 * ranks);
      for (const int c : {rank, 2 * ranks - 1 - rank})
        for (std::int32_t p = c * chunk; p < (c + 1) * chunk; ++p) layout.positions.push_back(p);
    } else {
      const std::int32_t part = length / ranks;
      for (std::int32_t p = rank * part; p < (rank + 1) * part; ++p) layout.positions.push_back(p);
    }
    layout.cu.push_back(static_cast<std::int32_t>(layout.positions.size()));
  }
  return layout;
}

void fill_random(const Tensor& t, std::uint64_t seed) {
  core::Rng rng(seed, core::RngPurpose::test);
  float* x = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) x[i] = static_cast<float>(rng.uniform() * 2 - 1);
}

struct Results {
  Tensor out, lse, dq, dk, dv;
  std::uint64_t bytes_sent = 0;
  std::uint64_t send_recv_bytes = 0;
  std::size_t scratch_bytes = 0;  // the scratch arena's high-water mark
};

struct Inputs {
  Tensor q, k, v, dout;
  model::LocalBinLayout layout;
};

Results run(GroupAttentionContext& attention, dist::Comm& group, const Inputs& in) {
  core::Arena activations("activations", 1 << 20);
  core::Arena scratch("scratch", 1 << 20);
  const model::SeamContext context{{}, &activations, &scratch};
  const std::int64_t rows = in.q.size(0);
  Results r{Tensor::zeros(in.q.shape(), DType::f32), Tensor::zeros({rows, kQueryHeads}, DType::f32),
            Tensor::zeros(in.q.shape(), DType::f32), Tensor::zeros(in.k.shape(), DType::f32),
            Tensor::zeros(in.k.shape(), DType::f32)};
  const dist::CommCounters before = group.counters();
  attention.set_group(&group);
  attention.begin_bin(context, in.layout);
  ops::AttentionSaved saved{r.lse};
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  attention.forward(context, 0, in.q, in.k, in.v, scale, r.out, saved);
  attention.backward(context, 0, in.dout, in.q, in.k, in.v, r.out, saved, scale, r.dq, r.dk, r.dv);
  const dist::CommCounters moved = dist::counters_difference(group.counters(), before);
  r.bytes_sent = moved.total().bytes_sent;
  r.send_recv_bytes = moved[dist::CommOp::send_recv].bytes_sent;
  r.scratch_bytes = scratch.high_water_bytes();
  return r;
}

double relative_difference(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// Rows with -inf lse (no visible key) must agree exactly; the others to round-off.
double worst_lse_difference(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(static_cast<double>(x) - y) / (1.0 + std::abs(y)));
  }
  return worst;
}

void check_ring_matches_all_gather(dist::Comm& group, const std::vector<std::int32_t>& lengths,
                                   bool zigzag, std::uint64_t seed, std::int32_t window = 0) {
  const int ranks = group.size();
  HostLayout host = shard(lengths, ranks, group.rank(), zigzag);
  const auto rows = static_cast<std::int64_t>(host.positions.size());
  Inputs in{
      Tensor::zeros({rows, kQueryHeads, kHeadDim}, DType::f32),
      Tensor::zeros({rows, kKvHeads, kHeadDim}, DType::f32),
      Tensor::zeros({rows, kKvHeads, kHeadDim}, DType::f32),
      Tensor::zeros({rows, kQueryHeads, kHeadDim}, DType::f32),
      {Tensor::view_of(host.cu.data(), {static_cast<std::int64_t>(host.cu.size())}, DType::i32),
       Tensor::view_of(host.positions.data(), {rows}, DType::i32)}};
  in.layout.sliding_window = window;
  const std::uint64_t rank_seed = seed * 64 + static_cast<std::uint64_t>(group.rank());
  fill_random(in.q, rank_seed * 4);
  fill_random(in.k, rank_seed * 4 + 1);
  fill_random(in.v, rank_seed * 4 + 2);
  fill_random(in.dout, rank_seed * 4 + 3);

  CpAttentionContext all_gather;
  CpRingAttentionContext ring;
  const Results expected = run(all_gather, group, in);
  const Results actual = run(ring, group, in);

  INFO("group '" << group.name() << "' of " << ranks << ", rank " << group.rank() << ", "
                 << (zigzag ? "zigzag" : "contiguous") << " shards, " << rows
                 << " local rows, window " << window);
  CHECK(relative_difference(actual.out, expected.out) <= 1e-6);
  CHECK(worst_lse_difference(actual.lse, expected.lse) <= 1e-6);
  CHECK(relative_difference(actual.dq, expected.dq) <= 1e-5);
  CHECK(relative_difference(actual.dk, expected.dk) <= 1e-5);
  CHECK(relative_difference(actual.dv, expected.dv) <= 1e-5);
  if (window > 0) {
    // The window hides keys both exchanges would otherwise attend.
    CpAttentionContext unwindowed;
    in.layout.sliding_window = 0;
    CHECK(relative_difference(run(unwindowed, group, in).out, expected.out) > 1e-3);
  }
  // The same bytes on the wire: (c-1) K/V blocks forward, (c-1) K/V plus (c-1) dK/dV blocks
  // backward, where all_gather gathers K/V twice and reduce-scatters dK/dV once.
  const std::uint64_t block_bytes = static_cast<std::uint64_t>(in.k.nbytes());
  CHECK(actual.send_recv_bytes == 6 * block_bytes * static_cast<std::uint64_t>(ranks - 1));
  CHECK(expected.send_recv_bytes == 0);
  CHECK(actual.bytes_sent == expected.bytes_sent);
  // Memory (docs/dist.md): the ring's scratch peak is the larger of forward's 4 K/V-sized
  // buffers plus a partial out and lse, and backward's 10 K/V-sized buffers plus the op's
  // D (one lse-sized buffer), whatever c (64 bytes of alignment per buffer allowed).
  if (ranks > 1) {
    const std::size_t kv = in.k.nbytes(), q = in.q.nbytes(), lse = expected.lse.nbytes();
    const std::size_t bound = std::max(4 * kv + q + lse, 10 * kv + lse) + 16 * 64;
    CHECK(actual.scratch_bytes <= bound);
    // all_gather holds 5 c K/V-sized buffers in backward.
    CHECK(expected.scratch_bytes >= 5 * static_cast<std::size_t>(ranks) * kv);
  }
}

struct Groups {
  std::unique_ptr<dist::Comm> pairs, singles;
};

Groups split_world() {
  dist::Comm& world = dist::testing::test_world();
  Groups groups;
  groups.pairs = world.split(world.rank() / 2, world.rank(), "pair");
  groups.singles = world.split(world.rank(), 0, "single");
  return groups;
}

// Lengths are multiples of 2c for the largest group tested (4 ranks), so every group can shard
// them.
const std::vector<std::int32_t> mixed_lengths{16, 8, 0, 640, 48, 8, 256};

TEST_CASE("ring CP attention equals all_gather on zigzag shards of mixed lengths", "[ring]") {
  dist::Comm& world = dist::testing::test_world();
  const Groups groups = split_world();
  check_ring_matches_all_gather(world, mixed_lengths, /*zigzag=*/true, 1);
  if (world.size() % 2 == 0) check_ring_matches_all_gather(*groups.pairs, mixed_lengths, true, 2);
  check_ring_matches_all_gather(*groups.singles, mixed_lengths, true, 3);
}

TEST_CASE("ring CP attention skips blocks no query can see and still equals all_gather", "[ring]") {
  // Contiguous shards: rank r's queries see nothing of ranks > r (whole blocks skipped in
  // forward, zero dK/dV contributions in backward).
  dist::Comm& world = dist::testing::test_world();
  const Groups groups = split_world();
  check_ring_matches_all_gather(world, mixed_lengths, /*zigzag=*/false, 4);
  if (world.size() % 2 == 0) check_ring_matches_all_gather(*groups.pairs, mixed_lengths, false, 5);
}

TEST_CASE("ring CP attention with a sliding window equals all_gather", "[ring]") {
  // Window 8: on zigzag shards of the long sequences most blocks are out of every query's
  // window (skipped) and many queries see no key of a block that is attended (lse -inf there,
  // left out of the merge); window 100 reaches some blocks partly; contiguous shards leave
  // each rank only its neighbour's block.
  dist::Comm& world = dist::testing::test_world();
  const Groups groups = split_world();
  check_ring_matches_all_gather(world, mixed_lengths, /*zigzag=*/true, 7, 8);
  check_ring_matches_all_gather(world, mixed_lengths, /*zigzag=*/true, 8, 100);
  check_ring_matches_all_gather(world, mixed_lengths, /*zigzag=*/false, 9, 8);
  if (world.size() % 2 == 0)
    check_ring_matches_all_gather(*groups.pairs, mixed_lengths, true, 10, 8);
}

TEST_CASE("ring CP attention on one sequence padded to the group's chunking", "[ring]") {
  // One row per chunk: every block is smaller than an attention tile.
  dist::Comm& world = dist::testing::test_world();
  check_ring_matches_all_gather(world, {8, 8}, /*zigzag=*/true, 6);
}

TEST_CASE("ring CP attention rejects a group whose ranks hold different bins", "[ring]") {
  dist::Comm& world = dist::testing::test_world();
  if (world.size() == 1) return;
  // Rank 0 holds one sequence more than the others.
  std::vector<std::int32_t> lengths{16};
  if (world.rank() == 0) lengths.push_back(16);
  HostLayout host = shard(lengths, world.size(), world.rank(), true);
  const auto rows = static_cast<std::int64_t>(host.positions.size());
  const model::LocalBinLayout layout{
      Tensor::view_of(host.cu.data(), {static_cast<std::int64_t>(host.cu.size())}, DType::i32),
      Tensor::view_of(host.positions.data(), {rows}, DType::i32)};
  core::Arena activations("activations", 1 << 16);
  core::Arena scratch("scratch", 1 << 16);
  CpRingAttentionContext ring;
  ring.set_group(&world);
  REQUIRE_THROWS_WITH(ring.begin_bin({{}, &activations, &scratch}, layout),
                      Catch::Contains("every rank of a group must hold the zigzag shard"));
}

}  // namespace
}  // namespace dyncp::parallel
