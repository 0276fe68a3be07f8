// The all-to-all exchange's head reordering (parallel/head_blocks.hpp) on device tensors
// against the host loops: packing, unpacking, and the sum of replicated K/V heads, bit for bit
// (the device sums in the host's order). Device memory is unreadable by host code here, so a
// host loop over a device tensor fails loudly.
#include "parallel/head_blocks.hpp"

#include <vector>

#include "core/tensor.hpp"
#include "gpu_test.hpp"
#include "ops/cuda/cuda_backend.hpp"

namespace dyncp::gpu_test {
namespace {

using core::Device;
using core::DType;
using core::Tensor;

Tensor on_device(std::vector<float>& values, core::Shape shape) {
  const Tensor device = Tensor::zeros(shape, DType::f32, Device::cuda);
  device.copy_from(Tensor::view_of(values.data(), shape, DType::f32));
  return device;
}

void check_round_trip(std::int64_t rows, std::int64_t heads, std::int64_t width,
                      const std::vector<std::int64_t>& first, std::int64_t n, bool sum) {
  ops::cuda::install_backend();
  const ops::OpContext cpu{};
  ops::OpContext gpu{};
  gpu.device = Device::cuda;
  const auto blocks_count = static_cast<std::int64_t>(first.size());
  std::vector<float> local = random_floats(static_cast<int>(rows * heads * width), 70);
  const core::Shape local_shape{rows, heads, width}, blocks_shape{blocks_count * rows, n, width};

  std::vector<float> blocks(static_cast<std::size_t>(blocks_count * rows * n * width));
  parallel::pack_head_blocks(cpu, Tensor::view_of(local.data(), local_shape, DType::f32), first, n,
                             Tensor::view_of(blocks.data(), blocks_shape, DType::f32));
  const Tensor d_local = on_device(local, local_shape);
  const Tensor d_blocks = Tensor::zeros(blocks_shape, DType::f32, Device::cuda);
  parallel::pack_head_blocks(gpu, d_local, first, n, d_blocks);
  expect_close("packed blocks", to_host(d_blocks), blocks, 0.0, 0.0);

  // Different values per block, so a sum that skips or repeats a replica shows.
  std::vector<float> incoming = random_floats(static_cast<int>(blocks.size()), 71);
  std::vector<float> back(local.size(), 1.0f);
  parallel::unpack_head_blocks(cpu, Tensor::view_of(incoming.data(), blocks_shape, DType::f32),
                               first, n, Tensor::view_of(back.data(), local_shape, DType::f32),
                               sum);
  const Tensor d_incoming = on_device(incoming, blocks_shape);
  const Tensor d_back = Tensor::zeros(local_shape, DType::f32, Device::cuda);
  parallel::unpack_head_blocks(gpu, d_incoming, first, n, d_back, sum);
  expect_close(sum ? "unpacked, replicas summed" : "unpacked", to_host(d_back), back, 0.0, 0.0);
}

GPU_TEST(head_blocks_split_heads) {
  // 4 ranks, 8 heads: 2 per rank, every head once.
  check_round_trip(/*rows=*/13, /*heads=*/8, /*width=*/6, {0, 2, 4, 6}, 2, /*sum=*/false);
}

GPU_TEST(head_blocks_replicated_kv_heads_summed) {
  // 8 ranks, 2 K/V heads: each head on 4 ranks; their gradients are summed in block order.
  check_round_trip(/*rows=*/9, /*heads=*/2, /*width=*/4, {0, 0, 0, 0, 1, 1, 1, 1}, 1,
                   /*sum=*/true);
  // [T, H] tensors (width 1), interleaved replicas.
  check_round_trip(/*rows=*/7, /*heads=*/2, /*width=*/1, {0, 1, 0, 1}, 1, /*sum=*/true);
}

}  // namespace
}  // namespace dyncp::gpu_test
