#pragma once
// The device a run trains on (dist.device), the checks a GPU run needs before anything is
// allocated, and the host copy of the parameters that checkpoints, exports and loads go
// through when the parameters live on the GPU.

#include <functional>
#include <memory>

#include "config/config_container.hpp"
#include "core/tensor.hpp"
#include "model/qwen3_moe_parameters.hpp"

namespace dyncp::train {

// cpu, or cuda when asked for (or `auto` with a CUDA backend and a visible GPU); selects this
// rank's GPU. Throws a config error (exit 2) naming the key when the recipe uses a feature the
// GPU path does not have yet, or when this binary has no CUDA backend.
core::Device resolve_training_device(const config::ConfigContainer& config, int world_size,
                                     int local_rank, int rank);

// Host code reads and writes parameters through this: on the CPU it is the parameters
// themselves; on the GPU a host copy made on first use and refreshed by download().
class HostParameters {
 public:
  explicit HostParameters(const model::Qwen3MoeParameters& parameters);
  // What must finish before the values may be read (ddp.overlap_param_gather: the parameter
  // gather the last optimizer step started, StepEngine::complete_parameter_gather).
  void set_pending_writes(std::function<void()> complete) { complete_ = std::move(complete); }
  // The current values on the host (one device-to-host copy on the GPU), after the pending
  // writes.
  const model::Qwen3MoeParameters& download();
  // The host copy to fill (loads); upload() then sends it to the device.
  const model::Qwen3MoeParameters& staging();
  void upload();

 private:
  const model::Qwen3MoeParameters& parameters_;
  std::unique_ptr<model::Qwen3MoeParameters> host_;
  std::function<void()> complete_;
};

}  // namespace dyncp::train
