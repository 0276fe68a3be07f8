#include "train/device_bin.hpp"

namespace dyncp::train {

const model::PackedBin& upload_bin(core::Arena& arena, const model::PackedBin& host_bin,
                                   model::PackedBin& device_bin) {
  arena.reset();
  device_bin = host_bin;
  device_bin.host_positions = host_bin.positions;
  for (core::Tensor* tensor : {&device_bin.token_ids, &device_bin.labels, &device_bin.positions,
                               &device_bin.loss_mask, &device_bin.token_is_real}) {
    if (!tensor->defined()) continue;
    const core::Tensor device = arena.allocate(tensor->shape(), tensor->dtype());
    device.copy_from(*tensor);
    *tensor = device;
  }
  return device_bin;
}

}  // namespace dyncp::train
