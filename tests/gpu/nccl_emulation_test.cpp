// NcclComm over the emulated NCCL (kernels/emulation/nccl.cpp) under mpirun, against MpiComm on
// the same values: every operation the training step uses gives the same bits on device
// buffers as MpiComm on host buffers (both sum in rank order), host buffers are refused as a
// GPU would refuse them, and RoutedComm sends device buffers over NCCL and host ones over MPI.
#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "device_buffer.hpp"
#include "dist/nccl_comm.hpp"
#include "dist/routed_comm.hpp"
#include "emulation_counters.h"
#include "mpi_test_world.hpp"
#include "ops/cuda/cuda_backend.hpp"

namespace dyncp {
namespace {

using core::DType;
using dist::testing::test_world;
using kernels::DeviceBuffer;

std::vector<float> values_for(int rank, std::size_t n, int salt) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Values whose sums depend on the order they are added in.
    values[i] = static_cast<float>((rank + 1) * 0.1 + 1e-7 * static_cast<double>(i * 7919 % 997) +
                                   salt * 1e3 * ((i % 3) == 0 ? 1.0 : -1.0));
  }
  return values;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

dist::NcclComm& nccl_world() {
  static std::unique_ptr<dist::NcclComm> comm = dist::NcclComm::create(test_world(), "nccl");
  return *comm;
}

TEST_CASE("reductions over the emulated NCCL equal MpiComm's bits") {
  dist::Comm& mpi = test_world();
  dist::NcclComm& nccl = nccl_world();
  const int p = mpi.size();
  const std::size_t block = 1001;
  for (const dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::max}) {
    std::vector<float> host = values_for(mpi.rank(), block * p, 1);
    DeviceBuffer<float> device(host);
    mpi.all_reduce(host.data(), host.data(), host.size(), DType::f32, op);
    nccl.all_reduce(device.get(), device.get(), host.size(), DType::f32, op);
    CHECK(same_bits(device.download(), host));
  }
  std::vector<float> send = values_for(mpi.rank(), block * p, 2);
  std::vector<float> host(block);
  DeviceBuffer<float> device_send(send), device_recv(block);
  mpi.reduce_scatter(send.data(), host.data(), block, DType::f32, dist::ReduceOp::sum);
  nccl.reduce_scatter(device_send.get(), device_recv.get(), block, DType::f32, dist::ReduceOp::sum);
  CHECK(same_bits(device_recv.download(), host));
}

TEST_CASE("moves over the emulated NCCL equal MpiComm's") {
  dist::Comm& mpi = test_world();
  dist::NcclComm& nccl = nccl_world();
  const int p = mpi.size();
  const int rank = mpi.rank();
  // Uneven blocks, one of them empty: rank r contributes 3 r + 1 elements, rank 1 none.
  std::vector<std::size_t> counts(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) counts[static_cast<std::size_t>(r)] = r == 1 ? 0 : 3 * r + 1;
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::vector<float> mine = values_for(rank, counts[static_cast<std::size_t>(rank)], 3);
  std::vector<float> host(total);
  DeviceBuffer<float> device_mine(mine.empty() ? std::vector<float>{0.0f} : mine),
      device_all(total);
  mpi.all_gather_v(mine.data(), mine.size(), host.data(), counts, DType::f32);
  nccl.all_gather_v(device_mine.get(), mine.size(), device_all.get(), counts, DType::f32);
  CHECK(same_bits(device_all.download(), host));

  // all_to_all_v: rank r sends (r + j) % 3 elements to rank j (some zero).
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(p)), recv_counts(p);
  for (int j = 0; j < p; ++j) send_counts[static_cast<std::size_t>(j)] = (rank + j) % 3;
  nccl.exchange_counts(send_counts, recv_counts);
  for (int j = 0; j < p; ++j)
    CHECK(recv_counts[static_cast<std::size_t>(j)] == static_cast<std::size_t>((j + rank) % 3));
  const std::size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
  const std::size_t received =
      std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
  const std::vector<float> outgoing = values_for(rank, sent, 4);
  std::vector<float> incoming(received);
  DeviceBuffer<float> device_out(outgoing.empty() ? std::vector<float>{0.0f} : outgoing),
      device_in(std::max<std::size_t>(received, 1));
  mpi.all_to_all_v(outgoing.data(), send_counts, incoming.data(), recv_counts, DType::f32);
  nccl.all_to_all_v(device_out.get(), send_counts, device_in.get(), recv_counts, DType::f32);
  std::vector<float> got = device_in.download();
  got.resize(received);
  CHECK(same_bits(got, incoming));

  // The CP ring: send to the next rank, receive from the previous one, started then waited.
  const std::vector<float> block = values_for(rank, 64, 5);
  DeviceBuffer<float> device_block(block), device_next(block.size());
  auto pending =
      nccl.start_send_recv(device_block.get(), block.size(), (rank + 1) % p, device_next.get(),
                           block.size(), (rank + p - 1) % p, DType::f32);
  nccl.wait(pending);
  CHECK(same_bits(device_next.download(), values_for((rank + p - 1) % p, 64, 5)));

  DeviceBuffer<float> device_root(values_for(rank, 16, 6));
  nccl.broadcast(device_root.get(), 16, DType::f32, p - 1);
  CHECK(same_bits(device_root.download(), values_for(p - 1, 16, 6)));
  nccl.barrier();
}

// The compute stream (the default stream) runs ahead of the communicator's stream for the
// whole test case (eager:0), then the order in force is put back.
struct ComputeRunsAhead {
  unsigned long long parameter = 0;
  emulation::StreamOrder kind = emulation::stream_order(&parameter);
  ComputeRunsAhead() { emulation::set_stream_order(emulation::StreamOrder::eager_one, 0); }
  ~ComputeRunsAhead() { emulation::set_stream_order(kind, parameter); }
};

TEST_CASE(
    "started transfers over the emulated NCCL equal MpiComm's once the compute stream "
    "waits for them, and not before") {
  const ComputeRunsAhead order;
  dist::Comm& mpi = test_world();
  dist::NcclComm& nccl = nccl_world();
  const int p = mpi.size();
  const int rank = mpi.rank();
  // reduce to the last rank, blocking and started, in place.
  std::vector<float> host = values_for(rank, 777, 10);
  DeviceBuffer<float> blocking(host), started(host);
  mpi.reduce(host.data(), host.size(), DType::f32, dist::ReduceOp::sum, p - 1);
  nccl.reduce(blocking.get(), host.size(), DType::f32, dist::ReduceOp::sum, p - 1);
  auto reduce =
      nccl.start_reduce(started.get(), host.size(), DType::f32, dist::ReduceOp::sum, p - 1);
  nccl.order_compute_after(reduce);
  CHECK(same_bits(blocking.download(), host));
  CHECK(same_bits(started.download(), host));

  // all_gather and all_to_all_v started together, then ordered.
  const std::vector<float> mine = values_for(rank, 40, 11);
  std::vector<float> gathered(40 * static_cast<std::size_t>(p));
  mpi.all_gather(mine.data(), 40, gathered.data(), DType::f32);
  DeviceBuffer<float> device_mine(mine), device_gathered(gathered.size());
  std::vector<std::size_t> counts(static_cast<std::size_t>(p), 5);
  const std::vector<float> outgoing = values_for(rank, 5 * static_cast<std::size_t>(p), 12);
  std::vector<float> incoming(outgoing.size());
  mpi.all_to_all_v(outgoing.data(), counts, incoming.data(), counts, DType::f32);
  DeviceBuffer<float> device_out(outgoing), device_in(incoming.size());
  auto gather = nccl.start_all_gather(device_mine.get(), 40, device_gathered.get(), DType::f32);
  auto exchange =
      nccl.start_all_to_all_v(device_out.get(), counts, device_in.get(), counts, DType::f32);
  nccl.order_compute_after(exchange);
  nccl.order_compute_after(gather);
  CHECK(same_bits(device_gathered.download(), gathered));
  CHECK(same_bits(device_in.download(), incoming));

  // A broadcast the compute stream is not ordered after: it reads the buffer before the
  // transfer landed (the root's own buffer is its source and never changes), and after wait().
  const std::vector<float> before = values_for(rank, 16, 13);
  DeviceBuffer<float> device_root(before);
  auto broadcast = nccl.start_broadcast(device_root.get(), 16, DType::f32, 0);
  CHECK(same_bits(device_root.download(), before));
  nccl.wait(broadcast);
  CHECK(same_bits(device_root.download(), values_for(0, 16, 13)));
}

TEST_CASE("ncclCommSplit groups reduce over their own ranks") {
  dist::Comm& mpi = test_world();
  const int rank = mpi.rank();
  auto halves = nccl_world().split(rank % 2, rank, "halves");
  auto mpi_halves = mpi.split(rank % 2, rank, "halves");
  REQUIRE(halves != nullptr);
  CHECK(halves->size() == mpi_halves->size());
  CHECK(halves->rank() == mpi_halves->rank());
  std::vector<float> host = values_for(rank, 300, 7);
  DeviceBuffer<float> device(host);
  mpi_halves->all_reduce(host.data(), host.data(), host.size(), DType::f32, dist::ReduceOp::sum);
  halves->all_reduce(device.get(), device.get(), host.size(), DType::f32, dist::ReduceOp::sum);
  CHECK(same_bits(device.download(), host));
  CHECK(nccl_world().split(-1, rank, "none") == nullptr);
  mpi.split(-1, rank, "none");
}

TEST_CASE("the emulated NCCL refuses host buffers") {
  std::vector<float> host(8, 1.0f);
  CHECK_THROWS_WITH(nccl_world().all_reduce(host.data(), host.data(), host.size(), DType::f32,
                                            dist::ReduceOp::sum),
                    Catch::Contains("not inside one device allocation"));
}

TEST_CASE("RoutedComm moves device buffers over NCCL and host buffers over MPI") {
  ops::cuda::install_backend();  // device-pointer classification
  dist::Comm& mpi = test_world();
  dist::install_nccl_device_comms();
  auto routed = dist::make_routed_world(mpi, 60.0);
  auto& channels = dynamic_cast<dist::RoutedComm&>(*routed);
  const auto nccl_calls = [&] { return channels.device_channel().counters().total().calls; };
  const auto mpi_calls = [&] { return channels.host_channel().counters().total().calls; };

  const std::uint64_t nccl_before = nccl_calls(), mpi_before = mpi_calls();
  std::vector<float> host = values_for(mpi.rank(), 100, 8);
  routed->all_reduce(host.data(), host.data(), host.size(), DType::f32, dist::ReduceOp::sum);
  CHECK(mpi_calls() == mpi_before + 1);
  CHECK(nccl_calls() == nccl_before);

  DeviceBuffer<float> device(values_for(mpi.rank(), 100, 8));
  routed->all_reduce(device.get(), device.get(), 100, DType::f32, dist::ReduceOp::sum);
  CHECK(nccl_calls() == nccl_before + 1);
  CHECK(same_bits(device.download(), host));
  CHECK(routed->counters().total().calls == 2);

  CHECK_THROWS_WITH(
      routed->all_reduce(host.data(), device.get(), 100, DType::f32, dist::ReduceOp::sum),
      Catch::Contains("one host and one device buffer"));

  // Splits carry both channels.
  auto pair = routed->split(mpi.rank() / 2, mpi.rank(), "pairs");
  DeviceBuffer<float> pair_device(values_for(mpi.rank(), 10, 9));
  pair->all_reduce(pair_device.get(), pair_device.get(), 10, DType::f32, dist::ReduceOp::max);
  std::vector<float> pair_host = values_for(mpi.rank(), 10, 9);
  pair->all_reduce(pair_host.data(), pair_host.data(), 10, DType::f32, dist::ReduceOp::max);
  CHECK(same_bits(pair_device.download(), pair_host));
}

}  // namespace
}  // namespace dyncp
