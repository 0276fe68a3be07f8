#pragma once
// model.attention_backend at start-up: on the GPU path with bf16 products, cuDNN's fused
// attention (fused) or this program's own kernel (flash); auto takes the fused kernel where the
// binary's CUDA backend has one and its support check passes for the model's attention shapes.
// The choice is logged once; fused where it cannot run is a config error (exit 2) naming the
// key and the reason.

#include <string>

#include "config/config_container.hpp"
#include "core/tensor.hpp"

namespace dyncp::train {

// Selects the kernel (ops::select_fused_attention) for a run on `device` and returns the log
// line it printed (empty on the CPU path, which runs its own op whatever the value).
std::string choose_attention_backend(const config::ConfigContainer& config, core::Device device);

}  // namespace dyncp::train
