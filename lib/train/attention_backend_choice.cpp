#include "train/attention_backend_choice.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "ops/attention_backend.hpp"

namespace dyncp::train {
namespace {

// Why the fused kernel cannot run this model here; empty when it can.
std::string fused_unavailable(const config::ConfigContainer& config) {
  if (config.mixed_precision != config::MixedPrecision::bf16_mixed) {
    return "cuDNN's fused attention takes bf16 operands and this run is fp32 (set "
           "mixed_precision: bf16_mixed)";
  }
  const ops::FusedAttention* fused = ops::installed_fused_attention();
  if (fused == nullptr) {
    const std::string why = ops::fused_attention_absence();
    return why.empty() ? "this binary's CUDA backend has no cuDNN fused attention" : why;
  }
  const auto& arch = config.model.architecture;
  ops::AttentionProblem problem;
  problem.q_heads = static_cast<int>(arch.num_attention_heads);
  problem.kv_heads = static_cast<int>(arch.num_key_value_heads);
  problem.head_dim = static_cast<int>(arch.head_dim);
  problem.sliding_window = static_cast<int>(arch.sliding_window);
  const std::string reason = fused->unsupported_reason(problem);
  if (reason.empty()) return reason;
  return fused->name() + "'s support check rejects " + std::to_string(problem.q_heads) +
         " query heads / " + std::to_string(problem.kv_heads) + " kv heads of " +
         std::to_string(problem.head_dim) +
         (problem.sliding_window > 0
              ? " with a sliding window of " + std::to_string(problem.sliding_window)
              : std::string()) +
         ": " + reason;
}

}  // namespace

std::string choose_attention_backend(const config::ConfigContainer& config, core::Device device) {
  const config::AttentionBackend asked = config.model.attention_backend;
  ops::select_fused_attention(false);
  if (device != core::Device::cuda) {
    if (asked == config::AttentionBackend::fused) {
      core::throw_config_error("model.attention_backend",
                               "fused: cuDNN's fused attention runs on the GPU path only, and this "
                               "run trains on the CPU (dist.device); use flash or auto, or "
                               "dist.device: cuda");
    }
    return {};
  }
  const std::string why_not = fused_unavailable(config);
  const std::string own = config.mixed_precision == config::MixedPrecision::bf16_mixed
                              ? "own flash kernel"
                              : "own fp32 kernel (an fp32 run)";
  std::string line;
  switch (asked) {
    case config::AttentionBackend::fused:
      if (!why_not.empty()) {
        core::throw_config_error("model.attention_backend",
                                 "fused: " + why_not + "; use attention_backend: flash or auto");
      }
      ops::select_fused_attention(true);
      line = "attention: " + ops::installed_fused_attention()->name() +
             " fused attention (model.attention_backend=fused)";
      break;
    case config::AttentionBackend::flash:
      line = "attention: " + own + " (model.attention_backend=flash)";
      break;
    case config::AttentionBackend::auto_select:
      if (why_not.empty()) {
        ops::select_fused_attention(true);
        line = "attention: " + ops::installed_fused_attention()->name() +
               " fused attention (model.attention_backend=auto: its support check passed)";
      } else {
        line = "attention: " + own + " (model.attention_backend=auto: " + why_not + ")";
      }
      break;
  }
  spdlog::info("{}", line);
  return line;
}

}  // namespace dyncp::train
