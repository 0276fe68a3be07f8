// Collective timings of MpiComm (not a test). For each size: the rank-order all_reduce of
// MpiComm next to OpenMPI's own MPI_Allreduce (the cost of determinism), plus all_gather,
// reduce_scatter and an uneven all_to_all_v. One JSON line per case on rank 0:
//   mpirun -np 4 build/tests/dist/dyncp_dist_comm_bench [repeats]
// Results are checked against a reference before timing (the sum of ranks + 1).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "dist/mpi_comm.hpp"

namespace {

using dyncp::core::DType;
using dyncp::dist::Comm;
using dyncp::dist::ReduceOp;

struct Timing {
  double median_ms;
  double min_ms;
};

Timing time_it(Comm& world, int repeats, const std::function<void()>& call) {
  call();  // warm-up: scratch buffers reach their size
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) {
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    call();
    samples.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  // The slowest rank decides a collective's time.
  world.all_reduce(samples.data(), samples.data(), samples.size(), DType::f64, ReduceOp::max);
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples.front()};
}

void report(Comm& world, const char* op, std::size_t bytes, double bus_factor, Timing timing) {
  if (world.rank() != 0) return;
  const double bus_gb_per_s = bus_factor * static_cast<double>(bytes) / (timing.median_ms * 1e6);
  std::printf(
      "{\"bench\":\"dist_comm\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,"
      "\"median_ms\":%.4f,\"min_ms\":%.4f,\"bus_GB_per_s\":%.3f}\n",
      op, world.size(), bytes, timing.median_ms, timing.min_ms, bus_gb_per_s);
}

}  // namespace

int main(int argc, char** argv) {
  dyncp::dist::MpiRuntime runtime(&argc, &argv);
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 20;
  auto world = runtime.world();
  const int p = world->size();
  const double ring = 2.0 * (p - 1) / p;
  const double one_way = static_cast<double>(p - 1) / p;
  for (const std::size_t count :
       {std::size_t{1024}, std::size_t{65536}, std::size_t{1} << 20, std::size_t{4} << 20}) {
    const std::size_t bytes = count * sizeof(float);
    std::vector<float> data(count, static_cast<float>(world->rank() + 1));
    std::vector<float> out(count);
    world->all_reduce(data.data(), out.data(), count, DType::f32, ReduceOp::sum);
    if (out.front() != static_cast<float>(p * (p + 1) / 2) || out.back() != out.front()) {
      std::fprintf(stderr, "all_reduce result wrong at %zu elements\n", count);
      return 1;
    }
    report(*world, "all_reduce_rank_order", bytes, ring, time_it(*world, repeats, [&] {
      world->all_reduce(data.data(), out.data(), count, DType::f32, ReduceOp::sum);
    }));
    report(*world, "MPI_Allreduce", bytes, ring, time_it(*world, repeats, [&] {
      MPI_Allreduce(data.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }));
    std::vector<float> gathered(count * static_cast<std::size_t>(p));
    report(*world, "all_gather", bytes * static_cast<std::size_t>(p), one_way,
           time_it(*world, repeats,
                   [&] { world->all_gather(data.data(), count, gathered.data(), DType::f32); }));
    report(*world, "reduce_scatter", bytes, one_way, time_it(*world, repeats, [&] {
      world->reduce_scatter(data.data(), out.data(), count / static_cast<std::size_t>(p),
                            DType::f32, ReduceOp::sum);
    }));
    // Uneven: rank r sends its peers blocks growing with the peer's rank.
    std::vector<std::size_t> send_counts(static_cast<std::size_t>(p));
    std::size_t total = 0;
    for (int peer = 0; peer < p; ++peer) {
      send_counts[static_cast<std::size_t>(peer)] =
          count / static_cast<std::size_t>(p) * (peer + 1) / static_cast<std::size_t>(p);
      total += send_counts[static_cast<std::size_t>(peer)];
    }
    std::vector<float> received;
    std::vector<std::size_t> recv_counts;
    report(*world, "all_to_all_v_exchange", total * sizeof(float), one_way,
           time_it(*world, repeats, [&] {
             world->all_to_all_v_exchange(std::span<const float>(data.data(), total), send_counts,
                                          received, recv_counts);
           }));
  }
  return 0;
}
