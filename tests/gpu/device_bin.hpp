#pragma once
// The model-step tests' copies of a packed bin on the device (what the trainer uploads per
// microbatch: token ids, labels, positions, masks; cu_seqlens stays on the host).

#include "core/tensor.hpp"
#include "model/qwen3_moe_model.hpp"

namespace dyncp::gpu_test {

inline core::Tensor to_device(const core::Tensor& host) {
  if (!host.defined()) return host;
  core::Tensor device = core::Tensor::empty(host.shape(), host.dtype(), core::Device::cuda);
  device.copy_from(host);
  return device;
}

inline model::PackedBin device_bin(const model::PackedBin& host) {
  model::PackedBin bin = host;
  bin.token_ids = to_device(host.token_ids);
  bin.labels = to_device(host.labels);
  bin.positions = to_device(host.positions);
  bin.host_positions = host.positions;  // as the step engine keeps them
  bin.loss_mask = to_device(host.loss_mask);
  bin.token_is_real = to_device(host.token_is_real);
  return bin;
}

}  // namespace dyncp::gpu_test
