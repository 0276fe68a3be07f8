// NcclComm with one rank on device buffers, bootstrapped by the in-process self communicator
// (no MPI needed): every collective is the identity on one rank, and the operations must still
// run, move the bytes and count the calls.
#include "dist/nccl_comm.hpp"

#include "dist/self_comm.hpp"
#include "gpu_test.hpp"

namespace dyncp::gpu_test {
namespace {

GPU_TEST(nccl_comm_one_rank) {
  auto self = dist::make_self_comm("bootstrap");
  auto nccl = dist::NcclComm::create(*self, "nccl_one_rank");
  expect(nccl->rank() == 0 && nccl->size() == 1, "one rank");
  const std::vector<float> values = random_floats(1000, 100);
  DeviceBuffer<float> a(values), b(values.size());

  nccl->all_reduce(a.get(), b.get(), values.size(), DType::f32, dist::ReduceOp::sum);
  expect_close("all_reduce sum", b.download(), values, 0.0, 0.0);
  nccl->all_reduce(a.get(), a.get(), values.size(), DType::f32, dist::ReduceOp::max);
  expect_close("all_reduce max in place", a.download(), values, 0.0, 0.0);

  b.zero();
  nccl->all_gather(a.get(), values.size(), b.get(), DType::f32);
  expect_close("all_gather", b.download(), values, 0.0, 0.0);

  b.zero();
  const std::vector<std::size_t> counts = {values.size()};
  nccl->all_gather_v(a.get(), values.size(), b.get(), counts, DType::f32);
  expect_close("all_gather_v", b.download(), values, 0.0, 0.0);

  b.zero();
  nccl->reduce_scatter(a.get(), b.get(), values.size(), DType::f32, dist::ReduceOp::sum);
  expect_close("reduce_scatter", b.download(), values, 0.0, 0.0);

  b.zero();
  nccl->all_to_all(a.get(), b.get(), values.size(), DType::f32);
  expect_close("all_to_all", b.download(), values, 0.0, 0.0);

  b.zero();
  nccl->all_to_all_v(a.get(), counts, b.get(), counts, DType::f32);
  expect_close("all_to_all_v", b.download(), values, 0.0, 0.0);

  nccl->broadcast(a.get(), values.size(), DType::f32, 0);
  expect_close("broadcast", a.download(), values, 0.0, 0.0);
  nccl->barrier();

  auto child = nccl->split(0, 0, "nccl_child");
  expect(child != nullptr && child->size() == 1, "split keeps the one rank");
  b.zero();
  child->all_reduce(a.get(), b.get(), values.size(), DType::f32, dist::ReduceOp::sum);
  expect_close("all_reduce on the split communicator", b.download(), values, 0.0, 0.0);
  expect(nccl->counters().total().calls == 10,
         "every call is counted (" + std::to_string(nccl->counters().total().calls) + ")");
}

}  // namespace
}  // namespace dyncp::gpu_test
