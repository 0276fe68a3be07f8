#include "train/training_device.hpp"

#include <string>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "dist/routed_comm.hpp"
#include "train/attention_backend_choice.hpp"

namespace dyncp::train {
namespace {

// What the GPU path cannot run in this binary, with the key that asks for it (docs/cuda.md).
void refuse_unbuilt_gpu_features(int world_size) {
  const auto refuse = [](const std::string& key, const std::string& why) {
    core::throw_config_error(key, why +
                                      " (dist.device: cuda; docs/cuda.md says what the GPU "
                                      "path runs today), or train with dist.device: cpu");
  };
  if (world_size > 1 && !dist::has_device_comm_factory())
    refuse("dist.device",
           "multi-rank GPU training needs NCCL, and this binary was built without it: run one "
           "rank per job or build with NCCL");
}

}  // namespace

core::Device resolve_training_device(const config::ConfigContainer& config, int world_size,
                                     int local_rank, int rank) {
  const config::Device asked = config.dist.device;
  const bool backend = core::has_device_memory() && core::device_memory().visible_devices() > 0;
  if (asked == config::Device::cpu || (asked == config::Device::auto_detect && !backend)) {
    choose_attention_backend(config, core::Device::cpu);
    return core::Device::cpu;
  }
  if (!backend) {
    core::throw_config_error("dist.device",
                             "cuda: this binary has no CUDA backend or sees no GPU (built "
                             "without CUDA, or no driver / CUDA_VISIBLE_DEVICES): use cpu");
  }
  refuse_unbuilt_gpu_features(world_size);
  core::device_memory().select_device(local_rank, rank);
  spdlog::info("device: {} device {} for local rank {}", core::device_memory().name(), local_rank,
               local_rank);
  choose_attention_backend(config, core::Device::cuda);  // after the device: cuDNN checks on it
  return core::Device::cuda;
}

HostParameters::HostParameters(const model::Qwen3MoeParameters& parameters)
    : parameters_(parameters) {}

const model::Qwen3MoeParameters& HostParameters::staging() {
  if (parameters_.device() == core::Device::cpu) return parameters_;
  if (!host_) {
    // The same pieces: this rank's experts and, under tensor parallelism, its pieces.
    host_ = std::make_unique<model::Qwen3MoeParameters>(
        parameters_.architecture(), parameters_.expert_range(), parameters_.all_values().dtype(),
        core::Device::cpu, parameters_.tensor_parallel());
  }
  return *host_;
}

const model::Qwen3MoeParameters& HostParameters::download() {
  if (complete_) complete_();
  const model::Qwen3MoeParameters& host = staging();
  if (&host != &parameters_) host.copy_values_from(parameters_);
  return host;
}

void HostParameters::upload() {
  if (host_) parameters_.copy_values_from(*host_);
}

}  // namespace dyncp::train
