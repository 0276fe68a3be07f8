// Every Comm operation against a reference computed locally from what every rank holds.
// Each rank's data is a function of (rank, index), so each rank can compute the expected
// result of the collective by itself.
#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "dist/comm.hpp"
#include "mpi_test_world.hpp"

using namespace dyncp::dist;
using dyncp::dist::testing::test_world;

namespace {

// Values whose sums round differently in different orders (divisions by 7 are inexact).
template <typename T>
T contribution(int rank, std::size_t index) {
  const std::uint64_t h = (static_cast<std::uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^
                          (index + 17) * 0xC2B2AE3D27D4EB4Full;
  const long long centred = static_cast<long long>((h >> 20) % 20001) - 10000;
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(centred) / static_cast<T>(7);
  } else if constexpr (std::is_unsigned_v<T>) {
    return static_cast<T>(h >> 56);
  } else {
    return static_cast<T>(centred);
  }
}

template <typename T>
std::vector<T> data_of(int rank, std::size_t count) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = contribution<T>(rank, i);
  return data;
}

// ((x_0 + x_1) + x_2) + ... in rank order: the order the Comm contract promises.
template <typename T>
std::vector<T> reference(int ranks, std::size_t count, ReduceOp op) {
  std::vector<T> result = data_of<T>(0, count);
  for (int rank = 1; rank < ranks; ++rank) {
    const std::vector<T> data = data_of<T>(rank, count);
    for (std::size_t i = 0; i < count; ++i) {
      result[i] =
          op == ReduceOp::sum ? static_cast<T>(result[i] + data[i]) : std::max(result[i], data[i]);
    }
  }
  return result;
}

template <typename T>
void check_all_reduce(std::size_t count, ReduceOp op, bool in_place) {
  Comm& world = test_world();
  const std::vector<T> send = data_of<T>(world.rank(), count);
  std::vector<T> recv = in_place ? send : std::vector<T>(count);
  const void* source = in_place ? recv.data() : send.data();
  world.all_reduce(source, recv.data(), count, dyncp::core::dtype_of<T>::value, op);
  INFO("dtype " << dyncp::core::dtype_name(dyncp::core::dtype_of<T>::value) << ", count " << count
                << (op == ReduceOp::sum ? ", sum" : ", max") << (in_place ? ", in place" : ""));
  // Bitwise: floating sums follow rank order on every rank.
  REQUIRE(recv == reference<T>(world.size(), count, op));
}

}  // namespace

TEST_CASE("comm: all_reduce sum and max equal the rank-order reference bit for bit",
          "[dist][mpi][comm]") {
  // 20011 takes the block all-to-all path on every world size; 1 and 7 the all-gather path.
  const std::size_t count =
      GENERATE(std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{20011});
  const bool in_place = GENERATE(false, true);
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    check_all_reduce<float>(count, op, in_place);
    check_all_reduce<double>(count, op, in_place);
    check_all_reduce<std::int32_t>(count, op, in_place);
    check_all_reduce<std::int64_t>(count, op, in_place);
    check_all_reduce<std::uint8_t>(count, op, in_place);
  }
}

TEST_CASE("comm: all_gather and uneven all_gather_v pack blocks in rank order",
          "[dist][mpi][comm]") {
  Comm& world = test_world();
  const std::size_t per_rank = 5;
  const std::vector<float> mine = data_of<float>(world.rank(), per_rank);
  std::vector<float> gathered(per_rank * static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const float>(mine), std::span<float>(gathered));
  for (int rank = 0; rank < world.size(); ++rank) {
    const auto expected = data_of<float>(rank, per_rank);
    REQUIRE(std::equal(expected.begin(), expected.end(),
                       gathered.begin() + static_cast<long>(rank * per_rank)));
  }

  // Rank r contributes (r * 3) % 5 elements: some ranks send nothing.
  std::vector<std::size_t> counts(static_cast<std::size_t>(world.size()));
  for (int rank = 0; rank < world.size(); ++rank)
    counts[static_cast<std::size_t>(rank)] = (rank * 3) % 5;
  const std::size_t own = counts[static_cast<std::size_t>(world.rank())];
  const std::vector<std::int64_t> send = data_of<std::int64_t>(world.rank(), own);
  std::vector<std::int64_t> recv(std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
  world.all_gather_v(send.data(), own, recv.data(), counts, dyncp::core::DType::i64);
  std::vector<std::int64_t> expected;
  for (int rank = 0; rank < world.size(); ++rank) {
    const auto block = data_of<std::int64_t>(rank, counts[static_cast<std::size_t>(rank)]);
    expected.insert(expected.end(), block.begin(), block.end());
  }
  REQUIRE(recv == expected);

  REQUIRE_THROWS_WITH(
      world.all_gather_v(send.data(), own + 1, recv.data(), counts, dyncp::core::DType::i64),
      Catch::Contains("but recv_counts"));
}

TEST_CASE("comm: reduce_scatter gives rank j the reduction of block j", "[dist][mpi][comm]") {
  Comm& world = test_world();
  const auto ranks = static_cast<std::size_t>(world.size());
  const std::size_t block = 9;
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    const std::vector<double> send = data_of<double>(world.rank(), block * ranks);
    std::vector<double> recv(block);
    world.reduce_scatter(send.data(), recv.data(), block, dyncp::core::DType::f64, op);
    const std::vector<double> full = reference<double>(world.size(), block * ranks, op);
    const auto start =
        full.begin() + static_cast<long>(block * static_cast<std::size_t>(world.rank()));
    REQUIRE(std::vector<double>(start, start + static_cast<long>(block)) == recv);

    const std::vector<std::int32_t> send_int = data_of<std::int32_t>(world.rank(), block * ranks);
    std::vector<std::int32_t> recv_int(block);
    world.reduce_scatter(send_int.data(), recv_int.data(), block, dyncp::core::DType::i32, op);
    const auto full_int = reference<std::int32_t>(world.size(), block * ranks, op);
    const auto start_int =
        full_int.begin() + static_cast<long>(block * static_cast<std::size_t>(world.rank()));
    REQUIRE(std::vector<std::int32_t>(start_int, start_int + static_cast<long>(block)) == recv_int);
  }
}

TEST_CASE("comm: uneven all_to_all_v with a counts exchange delivers every block",
          "[dist][mpi][comm]") {
  Comm& world = test_world();
  const int me = world.rank();
  // Rank s sends (s + 2 d) % 4 elements to rank d, valued s * 1000 + d * 10 + k.
  auto count_from_to = [](int source, int dest) {
    return static_cast<std::size_t>((source + 2 * dest) % 4);
  };
  std::vector<std::size_t> send_counts;
  std::vector<std::int32_t> send;
  for (int dest = 0; dest < world.size(); ++dest) {
    send_counts.push_back(count_from_to(me, dest));
    for (std::size_t k = 0; k < send_counts.back(); ++k) {
      send.push_back(me * 1000 + dest * 10 + static_cast<std::int32_t>(k));
    }
  }
  std::vector<std::int32_t> recv;
  std::vector<std::size_t> recv_counts;
  world.all_to_all_v_exchange(std::span<const std::int32_t>(send), send_counts, recv, recv_counts);
  std::vector<std::int32_t> expected;
  for (int source = 0; source < world.size(); ++source) {
    REQUIRE(recv_counts[static_cast<std::size_t>(source)] == count_from_to(source, me));
    for (std::size_t k = 0; k < count_from_to(source, me); ++k) {
      expected.push_back(source * 1000 + me * 10 + static_cast<std::int32_t>(k));
    }
  }
  REQUIRE(recv == expected);

  // Equal blocks: all_to_all.
  std::vector<std::uint8_t> out(static_cast<std::size_t>(world.size()) * 2);
  std::vector<std::uint8_t> in(out.size());
  for (int dest = 0; dest < world.size(); ++dest) {
    out[static_cast<std::size_t>(2 * dest)] = static_cast<std::uint8_t>(me);
    out[static_cast<std::size_t>(2 * dest + 1)] = static_cast<std::uint8_t>(dest);
  }
  world.all_to_all(out.data(), in.data(), 2, dyncp::core::DType::u8);
  for (int source = 0; source < world.size(); ++source) {
    REQUIRE(in[static_cast<std::size_t>(2 * source)] == source);
    REQUIRE(in[static_cast<std::size_t>(2 * source + 1)] == me);
  }
}

TEST_CASE("comm: send/recv around a ring, broadcast and barrier", "[dist][mpi][comm]") {
  Comm& world = test_world();
  const int me = world.rank();
  const int size = world.size();
  if (size > 1) {
    const std::vector<float> outgoing = data_of<float>(me, 33);
    std::vector<float> incoming(33);
    const int next = (me + 1) % size;
    const int previous = (me + size - 1) % size;
    // Even ranks send first, odd ranks receive first: no cycle of blocked sends.
    if (me % 2 == 0) {
      world.send(outgoing.data(), outgoing.size(), dyncp::core::DType::f32, next, 7);
      world.recv(incoming.data(), incoming.size(), dyncp::core::DType::f32, previous, 7);
    } else {
      world.recv(incoming.data(), incoming.size(), dyncp::core::DType::f32, previous, 7);
      world.send(outgoing.data(), outgoing.size(), dyncp::core::DType::f32, next, 7);
    }
    REQUIRE(incoming == data_of<float>(previous, 33));
  }
  const int root = size - 1;
  std::vector<std::int64_t> payload =
      me == root ? data_of<std::int64_t>(root, 12) : std::vector<std::int64_t>(12, -1);
  world.broadcast(std::span<std::int64_t>(payload), root);
  REQUIRE(payload == data_of<std::int64_t>(root, 12));
  world.barrier();
  REQUIRE_THROWS_WITH(world.send(payload.data(), 1, dyncp::core::DType::i64, size, 0),
                      Catch::Contains("destination rank"));
}

TEST_CASE("comm: non-blocking send_recv passes blocks round a ring and counts its bytes",
          "[dist][mpi][comm]") {
  Comm& world = test_world();
  const int me = world.rank();
  const int size = world.size();
  const int next = (me + 1) % size;
  const int previous = (me + size - 1) % size;
  const CommCounters before = world.counters();
  // Two exchanges in flight at once (as the ring's K and V), then size - 1 steps: after step i
  // this rank holds the block of rank (me - i - 1) mod size.
  std::vector<float> held = data_of<float>(me, 2000), incoming(2000);
  std::vector<std::int64_t> held_ids(3, me), incoming_ids(3);
  for (int step = 0; step + 1 < size; ++step) {
    Comm::PendingSendRecv blocks =
        world.start_send_recv(held.data(), held.size(), next, incoming.data(), incoming.size(),
                              previous, dyncp::core::DType::f32, 11);
    Comm::PendingSendRecv ids = world.start_send_recv(held_ids.data(), 3, next, incoming_ids.data(),
                                                      3, previous, dyncp::core::DType::i64, 12);
    world.wait(ids);
    world.wait(blocks);
    CHECK(blocks.slot == -1);
    held.swap(incoming);
    held_ids.swap(incoming_ids);
    const int source = ((me - step - 1) % size + size) % size;
    REQUIRE(held == data_of<float>(source, 2000));
    REQUIRE(held_ids == std::vector<std::int64_t>(3, source));
  }
  const OpCounter moved = counters_difference(world.counters(), before)[CommOp::send_recv];
  CHECK(moved.calls == 2 * static_cast<std::uint64_t>(size - 1));
  CHECK(moved.bytes_sent == static_cast<std::uint64_t>(size - 1) * (2000 * 4 + 3 * 8));
  CHECK(moved.bytes_received == moved.bytes_sent);
  // A self-exchange is a copy and moves no bytes.
  std::vector<float> copy(2000);
  Comm::PendingSendRecv self = world.start_send_recv(held.data(), held.size(), me, copy.data(),
                                                     copy.size(), me, dyncp::core::DType::f32);
  world.wait(self);
  CHECK(copy == held);
  CHECK(world.counters()[CommOp::send_recv].bytes_sent ==
        before[CommOp::send_recv].bytes_sent + moved.bytes_sent);
  REQUIRE_THROWS_WITH(world.wait(self), Catch::Contains("no transfer is pending"));
  REQUIRE_THROWS_WITH(world.start_send_recv(held.data(), 1, size, copy.data(), 1, previous,
                                            dyncp::core::DType::f32),
                      Catch::Contains("destination rank"));
}

TEST_CASE("comm: reduce adds in rank order on the root and leaves the others' buffers",
          "[dist][mpi][comm]") {
  Comm& world = test_world();
  const int size = world.size();
  for (const int root : {0, size - 1}) {
    for (const std::size_t count : {std::size_t{1}, std::size_t{4099}}) {
      std::vector<double> data = data_of<double>(world.rank(), count);
      const CommCounters before = world.counters();
      world.reduce(data.data(), count, dyncp::core::DType::f64, ReduceOp::sum, root);
      if (world.rank() == root) {
        REQUIRE(data == reference<double>(size, count, ReduceOp::sum));
      } else {
        REQUIRE(data == data_of<double>(world.rank(), count));
      }
      const OpCounter moved = counters_difference(world.counters(), before)[CommOp::reduce];
      CHECK(moved.calls == 1);
      CHECK(moved.bytes_sent == (world.rank() == root ? 0 : count * 8));
      CHECK(moved.bytes_received ==
            (world.rank() == root ? count * 8 * static_cast<std::size_t>(size - 1) : 0));
    }
  }
}

TEST_CASE("comm: started collectives give the blocking ones' results once finished",
          "[dist][mpi][comm]") {
  Comm& world = test_world();
  const int size = world.size();
  const int me = world.rank();
  const auto f32 = dyncp::core::DType::f32;
  // all_gather, waited for on the host.
  const std::vector<float> mine = data_of<float>(me, 33);
  std::vector<float> gathered(33 * static_cast<std::size_t>(size)), expected(gathered.size());
  world.all_gather(mine.data(), 33, expected.data(), f32);
  Comm::Pending gather = world.start_all_gather(mine.data(), 33, gathered.data(), f32);
  CHECK(gather.slot != -1);
  world.wait(gather);
  CHECK(gather.slot == -1);
  REQUIRE(gathered == expected);
  // all_to_all_v with uneven (some empty) blocks, finished by order_compute_after (on a host
  // communicator: a wait).
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(size)), recv_counts(send_counts);
  for (int j = 0; j < size; ++j) {
    send_counts[static_cast<std::size_t>(j)] = static_cast<std::size_t>((me + j) % 3);
    recv_counts[static_cast<std::size_t>(j)] = static_cast<std::size_t>((j + me) % 3);
  }
  const std::size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
  const std::size_t received =
      std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
  const std::vector<float> outgoing = data_of<float>(me, sent);
  std::vector<float> incoming(received + 1), blocking(received + 1);
  world.all_to_all_v(outgoing.data(), send_counts, blocking.data(), recv_counts, f32);
  Comm::Pending exchange =
      world.start_all_to_all_v(outgoing.data(), send_counts, incoming.data(), recv_counts, f32);
  world.order_compute_after(exchange);
  REQUIRE(incoming == blocking);
  // broadcast and reduce in place, several in flight at once.
  std::vector<float> broadcast = data_of<float>(me, 20);
  std::vector<double> summed = data_of<double>(me, 50);
  Comm::Pending first = world.start_broadcast(broadcast.data(), 20, f32, size - 1);
  Comm::Pending second =
      world.start_reduce(summed.data(), 50, dyncp::core::DType::f64, ReduceOp::sum, 0);
  world.wait(second);
  world.wait(first);
  REQUIRE(broadcast == data_of<float>(size - 1, 20));
  if (me == 0) REQUIRE(summed == reference<double>(size, 50, ReduceOp::sum));
  REQUIRE_THROWS_WITH(world.order_compute_after(first), Catch::Contains("no transfer is pending"));
}

TEST_CASE("comm: bf16 moves but does not reduce", "[dist][mpi][comm]") {
  Comm& world = test_world();
  std::vector<std::uint16_t> bits(4, 0x3f80);
  REQUIRE_THROWS_WITH(world.all_reduce(bits.data(), bits.data(), bits.size(),
                                       dyncp::core::DType::bf16, ReduceOp::sum),
                      Catch::Contains("bf16 cannot be reduced"));
  std::vector<std::uint16_t> gathered(4 * static_cast<std::size_t>(world.size()));
  world.all_gather(bits.data(), bits.size(), gathered.data(), dyncp::core::DType::bf16);
  REQUIRE(gathered == std::vector<std::uint16_t>(gathered.size(), 0x3f80));
}

TEST_CASE("comm: counters hold the logical bytes of each operation", "[dist][mpi][comm]") {
  auto child = test_world().split(0, test_world().rank(), "counted");
  Comm& comm = *child;
  const auto p = static_cast<std::uint64_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  std::vector<float> data(100, 1.0f);
  std::vector<float> gathered(100 * comm.size());
  comm.all_gather(data.data(), 100, gathered.data(), dyncp::core::DType::f32);
  CHECK(comm.counters()[CommOp::all_gather].calls == 1);
  CHECK(comm.counters()[CommOp::all_gather].bytes_sent == 400 * (p - 1));
  CHECK(comm.counters()[CommOp::all_gather].bytes_received == 400 * (p - 1));

  comm.all_reduce(std::span<float>(data), ReduceOp::sum);
  CHECK(comm.counters()[CommOp::all_reduce].bytes_sent == 2 * 400 * (p - 1) / p);

  // all_to_all_v: 3 elements to every other rank, none to itself.
  std::vector<std::size_t> counts(comm.size(), 3);
  counts[me] = 0;
  std::vector<double> out(3 * (comm.size() - 1)), in(out.size());
  comm.all_to_all_v(out.data(), counts, in.data(), counts, dyncp::core::DType::f64);
  CHECK(comm.counters()[CommOp::all_to_all_v].bytes_sent == 24 * (p - 1));

  comm.broadcast(data.data(), 10, dyncp::core::DType::f32, 0);
  CHECK(comm.counters()[CommOp::broadcast].bytes_sent == (me == 0 ? 40 * (p - 1) : 0));
  CHECK(comm.counters()[CommOp::broadcast].bytes_received == (me == 0 ? 0 : 40));

  comm.barrier();
  const OpCounter total = comm.counters().total();
  CHECK(total.calls == 5);
  CHECK(total.bytes_sent ==
        400 * (p - 1) + 2 * 400 * (p - 1) / p + 24 * (p - 1) + (me == 0 ? 40 * (p - 1) : 0));
  // Counters are per communicator: the child's calls left the parent's untouched.
  const CommCounters before = comm.counters();
  comm.barrier();
  CHECK(counters_difference(comm.counters(), before).total().calls == 1);
  comm.reset_counters();
  CHECK(comm.counters().total().calls == 0);
}

TEST_CASE("comm: split forms sub-communicators ordered by key", "[dist][mpi][comm]") {
  Comm& world = test_world();
  const int me = world.rank();
  // Even and odd ranks, each ordered by descending world rank.
  auto half = world.split(me % 2, -me, "parity");
  REQUIRE(half != nullptr);
  std::vector<int> members;
  for (int rank = world.size() - 1; rank >= 0; --rank) {
    if (rank % 2 == me % 2) members.push_back(rank);
  }
  REQUIRE(half->size() == static_cast<int>(members.size()));
  REQUIRE(members[static_cast<std::size_t>(half->rank())] == me);
  std::int32_t rank_value = me;
  std::vector<std::int32_t> gathered(members.size());
  half->all_gather(&rank_value, 1, gathered.data(), dyncp::core::DType::i32);
  REQUIRE(std::vector<int>(gathered.begin(), gathered.end()) == members);
  const std::uint64_t world_calls = world.counters().total().calls;
  half->barrier();
  CHECK(world.counters().total().calls == world_calls);

  // A negative color leaves the rank out.
  auto only_zero = world.split(me == 0 ? 0 : -1, 0, "rank0");
  CHECK((only_zero != nullptr) == (me == 0));
  if (only_zero) CHECK(only_zero->size() == 1);
}
