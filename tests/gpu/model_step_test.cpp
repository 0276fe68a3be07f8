// The whole model step on the device against the CPU step: one packed bin of the Qwen3-MoE
// fixture, fp32, local seams. Every op of the step runs through the ops' CUDA backend, so a
// missing copy, a host read of device data or a kernel that disagrees with its CPU op shows
// here. Loss, per-token losses and every gradient must agree to fp32 round-off.
#include <string>
#include <vector>

#include "core/device_memory.hpp"
#include "device_bin.hpp"
#include "gpu_test.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"
#include "ops/cuda/cuda_backend.hpp"

namespace dyncp::gpu_test {
namespace {

using core::Device;
using core::DType;
using core::Tensor;

std::vector<float> to_host(const Tensor& t) {
  std::vector<float> values(static_cast<std::size_t>(t.numel()));
  Tensor::view_of(values.data(), t.shape(), DType::f32).copy_from(t);
  return values;
}

struct StepResult {
  model::BinResult result;
  std::vector<float> per_token_loss, grads;
};

StepResult run_step(model::Qwen3MoeModel& m, const model::PackedBin& bin, std::int64_t loss_tokens,
                    Device device) {
  model::BinOptions options;
  options.loss_grad_scale = 1.0 / static_cast<double>(loss_tokens);
  options.per_token_loss = Tensor::zeros({bin.token_ids.numel()}, DType::f32, device);
  model::LocalSeams seams;
  m.parameters().zero_grads();
  StepResult out;
  out.result = m.run_bin(bin, seams.seams(), options);
  out.per_token_loss = to_host(options.per_token_loss);
  out.grads = to_host(m.parameters().all_grads());
  return out;
}

GPU_TEST(model_step_matches_cpu_fp32) {
  ops::cuda::install_backend();
  const std::string dir = std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/model/qwen3_moe_a";
  const auto cpu_model = model::load_hf_model(dir);
  const auto sequences = model::read_batch_json(dir + "/batch.json");
  const auto packed = model::pack_sequences(sequences);
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;

  model::ModelOptions options = cpu_model->options();
  options.device = Device::cuda;
  model::Qwen3MoeModel gpu_model(cpu_model->architecture(), options);
  gpu_model.parameters().copy_values_from(cpu_model->parameters());
  const model::PackedBin on_device = device_bin(packed.bin);

  const StepResult want = run_step(*cpu_model, packed.bin, loss_tokens, Device::cpu);
  const StepResult got = run_step(gpu_model, on_device, loss_tokens, Device::cuda);
  expect(got.result.loss_tokens == want.result.loss_tokens, "loss token counts agree");
  expect_close("loss sum", {static_cast<float>(got.result.loss_sum)},
               {static_cast<float>(want.result.loss_sum)}, 0.0, 1e-5);
  expect_close("per-token loss", got.per_token_loss, want.per_token_loss, 1e-5, 1e-5);
  expect_close("every gradient", got.grads, want.grads, 1e-5, 1e-4);
  // A second bin on the same model reuses its arenas (steady state).
  const StepResult again = run_step(gpu_model, on_device, loss_tokens, Device::cuda);
  expect(again.grads == got.grads, "a repeated bin gives the same gradients");
}

}  // namespace
}  // namespace dyncp::gpu_test
