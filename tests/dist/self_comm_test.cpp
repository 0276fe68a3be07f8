#include "dist/self_comm.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "dist/parallel_state.hpp"

using namespace dyncp::dist;
using dyncp::core::DType;

TEST_CASE("self comm: every collective on one rank returns the rank's own data", "[dist][self]") {
  auto self = make_self_comm();
  REQUIRE(self->size() == 1);
  REQUIRE(self->rank() == 0);
  std::vector<float> data = {1.0f, 2.5f, -3.0f};
  std::vector<float> out(3);
  self->all_reduce(data.data(), out.data(), 3, DType::f32, ReduceOp::sum);
  CHECK(out == data);
  std::vector<float> gathered(3);
  self->all_gather(std::span<const float>(data), std::span<float>(gathered));
  CHECK(gathered == data);
  std::vector<std::int32_t> tokens = {4, 5};
  std::vector<std::int32_t> received;
  std::vector<std::size_t> counts;
  const std::vector<std::size_t> send_counts = {2};
  self->all_to_all_v_exchange(std::span<const std::int32_t>(tokens), send_counts, received, counts);
  CHECK(received == tokens);
  CHECK(counts == std::vector<std::size_t>{2});
  REQUIRE_THROWS_WITH(self->send(data.data(), 1, DType::f32, 0), Catch::Contains("has no peer"));
  CHECK(self->counters().total().bytes_sent == 0);
  CHECK(self->counters().total().calls == 5);  // all_reduce, all_gather, counts, payload, send
  // A one-rank ring: the exchange with itself is a copy.
  std::vector<float> ring(3);
  Comm::PendingSendRecv pending =
      self->start_send_recv(data.data(), 3, 0, ring.data(), 3, 0, DType::f32);
  self->wait(pending);
  CHECK(ring == data);
  CHECK(self->counters()[CommOp::send_recv].calls == 1);
  CHECK(self->counters().total().bytes_sent == 0);
}

TEST_CASE("self comm: a one-rank ParallelState builds every static group without MPI",
          "[dist][self]") {
  auto world = make_self_comm("world");
  ParallelLayout layout;  // dp = cp = ep = 1
  ParallelState state(*world, layout);
  for (const GroupAxis axis : all_group_axes) CHECK(state.group(axis).size() == 1);
  CHECK_THAT(format_layout(layout),
             Catch::Contains("world 1 = data_parallel 1 x context_parallel 1"));
}
