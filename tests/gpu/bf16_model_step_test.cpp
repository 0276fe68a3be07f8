// mixed_precision: bf16_mixed, the whole model step on the device against the CPU step
// (docs/precision.md): the same bf16 semantics on both, so every gradient tensor agrees far
// closer than either does to fp32. Run twice: the fixture's head_dim 24 (attention takes the
// fp32 kernel on bf16-rounded q/k/v) and head_dim 16 with seeded weights (the bf16 WMMA
// attention kernel, which also rounds P and dS). Every token is routed to every expert, so no
// top-k choice can flip between the runs (a flip moves a token's whole contribution from one
// expert to another, docs/precision.md); the trainer tests cover real top-k routing.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "device_bin.hpp"
#include "gpu_test.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"
#include "ops/cuda/cuda_backend.hpp"

namespace dyncp::gpu_test {
namespace {

using core::Device;

struct Step {
  double loss_sum = 0;
  std::vector<float> grads;
};

Step run_step(model::Qwen3MoeModel& m, const model::PackedBin& bin, std::int64_t loss_tokens) {
  model::BinOptions options;
  options.loss_grad_scale = 1.0 / static_cast<double>(loss_tokens);
  model::LocalSeams seams;
  m.parameters().zero_grads();
  Step out;
  out.loss_sum = m.run_bin(bin, seams.seams(), options).loss_sum;
  const Tensor& grads = m.parameters().all_grads();
  out.grads.resize(static_cast<std::size_t>(grads.numel()));
  Tensor::view_of(out.grads.data(), grads.shape(), DType::f32).copy_from(grads);
  return out;
}

// Worst relative L2 difference over the HF tensors of `layout`.
double worst_tensor_error(const model::Qwen3MoeParameters& layout, const std::vector<float>& got,
                          const std::vector<float>& want, std::string& worst_name) {
  const float* base = layout.all_grads().data<float>();
  double worst = 0;
  for (const auto& tensor : layout.hf_tensors()) {
    const auto offset = tensor.grad.data<float>() - base;
    double diff = 0, norm = 0;
    for (std::int64_t i = offset; i < offset + tensor.grad.numel(); ++i) {
      const double d = static_cast<double>(got[i]) - want[i];
      diff += d * d;
      norm += static_cast<double>(want[i]) * want[i];
    }
    const double error = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    if (error > worst) {
      worst = error;
      worst_name = tensor.name;
    }
  }
  return worst;
}

std::string fixture_dir(const std::string& name) {
  return std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/model/" + name;
}

// gradient_u: the per-tensor bound against CPU bf16, in units of u.
// fp32_u: the per-tensor bound against CPU fp32, in units of u.
void check_bf16_step(const std::string& dir, const config::ModelArchitecture& architecture,
                     bool seeded_weights, double gradient_u = 8, double fp32_u = 32) {
  const auto fixture = model::load_hf_model(dir);
  model::ModelOptions options = fixture->options();
  options.precision = ops::ComputePrecision::bf16;
  // The GPU stores activations in bf16 under bf16 products (the default there); the CPU
  // reference does the same, so both round the same values (docs/precision.md).
  options.bf16_activations = true;
  model::Qwen3MoeModel cpu_bf16(architecture, options);
  model::ModelOptions fp32_options = fixture->options();
  model::Qwen3MoeModel cpu_fp32(architecture, fp32_options);
  if (seeded_weights) {
    cpu_bf16.parameters().init_random(11);
  } else {
    cpu_bf16.parameters().copy_values_from(fixture->parameters());
  }
  cpu_fp32.parameters().copy_values_from(cpu_bf16.parameters());
  options.device = Device::cuda;
  options.bf16_activations.reset();
  model::Qwen3MoeModel gpu_bf16(architecture, options);
  expect(gpu_bf16.bf16_activations(), "the GPU stores activations in bf16 under bf16 products");
  gpu_bf16.parameters().copy_values_from(cpu_bf16.parameters());

  const auto sequences = model::read_batch_json(dir + "/batch.json");
  const auto packed = model::pack_sequences(sequences);
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  const model::PackedBin on_device = device_bin(packed.bin);

  const Step fp32 = run_step(cpu_fp32, packed.bin, loss_tokens);
  const Step cpu = run_step(cpu_bf16, packed.bin, loss_tokens);
  const Step gpu = run_step(gpu_bf16, on_device, loss_tokens);
  const double u = 0x1p-8;  // bf16 unit roundoff (docs/precision.md)
  const double gpu_cpu_loss = std::abs(gpu.loss_sum - cpu.loss_sum) / std::abs(cpu.loss_sum);
  const double gpu_fp32_loss = std::abs(gpu.loss_sum - fp32.loss_sum) / std::abs(fp32.loss_sum);
  std::string gpu_cpu_name, gpu_fp32_name;
  const double gpu_cpu =
      worst_tensor_error(cpu_bf16.parameters(), gpu.grads, cpu.grads, gpu_cpu_name);
  const double gpu_fp32 =
      worst_tensor_error(cpu_bf16.parameters(), gpu.grads, fp32.grads, gpu_fp32_name);
  std::printf(
      "  %s, head_dim %lld: GPU bf16 vs CPU bf16: loss %.2e, worst gradient %s %.2e; "
      "GPU bf16 vs CPU fp32: loss %.2e, worst gradient %s %.2e\n",
      architecture.model_type.c_str(), static_cast<long long>(architecture.head_dim), gpu_cpu_loss,
      gpu_cpu_name.c_str(), gpu_cpu, gpu_fp32_loss, gpu_fp32_name.c_str(), gpu_fp32);
  // Against CPU bf16: the same rounded operands; accumulation order (and the bf16 attention
  // kernel's P / dS rounding) are all that differ.
  expect(gpu_cpu_loss <= u, "GPU bf16 loss within u of CPU bf16");
  expect(gpu_cpu <= gradient_u * u,
         "every GPU bf16 gradient tensor within " + std::to_string(gradient_u) + "u of CPU bf16");
  // Against fp32: the bf16 tolerances of docs/precision.md, and bf16 is in effect.
  expect(gpu_fp32_loss <= 2 * u && gpu.loss_sum != fp32.loss_sum,
         "GPU bf16 loss differs from fp32, by at most 2u");
  expect(gpu_fp32 <= fp32_u * u,
         "every GPU bf16 gradient tensor within " + std::to_string(fp32_u) + "u of fp32");
}

GPU_TEST(model_step_bf16_matches_cpu_bf16) {
  ops::cuda::install_backend();
  const std::string dir = fixture_dir("qwen3_moe_a");
  config::ModelArchitecture architecture = model::load_hf_model(dir)->architecture();
  architecture.num_experts_per_tok = architecture.num_experts;
  check_bf16_step(dir, architecture, /*seeded_weights=*/false);
  architecture.head_dim = 16;
  check_bf16_step(dir, architecture, /*seeded_weights=*/true);
}

// config.json's sliding window (8) with head_dim 16: the bf16 WMMA attention kernel masks and
// skips tiles by it.
GPU_TEST(sliding_window_model_step_bf16_matches_cpu_bf16) {
  ops::cuda::install_backend();
  const std::string dir = fixture_dir("qwen3_moe_sliding_window");
  config::ModelArchitecture architecture = model::load_hf_model(dir)->architecture();
  architecture.num_experts_per_tok = architecture.num_experts;
  check_bf16_step(dir, architecture, /*seeded_weights=*/false);
}

// The hybrid: its projections read bf16 operands; its Gated DeltaNet element-wise ops stay fp32
// on both, but the GPU's gated delta rule runs its chunk products on tensor cores (split bf16
// operands, about 16 bits) where the CPU's stay fp32: 16u per tensor against CPU bf16
// (docs/cuda.md section 3; measured 5.1u on a layer-0 expert, 1.5u with fp32 chunk products).
// Against fp32 48u: the bf16 residual stream and expert outputs of bf16 activations move the
// same layer-0 expert 37u from fp32 (17.8u with fp32 activations; docs/precision.md).
GPU_TEST(hybrid_model_step_bf16_matches_cpu_bf16) {
  ops::cuda::install_backend();
  const std::string dir = fixture_dir("qwen3_5_moe_b");
  config::ModelArchitecture architecture = model::load_hf_model(dir)->architecture();
  architecture.num_experts_per_tok = architecture.num_experts;
  check_bf16_step(dir, architecture, /*seeded_weights=*/false, /*gradient_u=*/16,
                  /*fp32_u=*/48);
}

// bf16 activation storage against fp32 storage, both under bf16 products on the device, with
// and without full recompute: the arenas' high-water mark falls; the loss and gradients stay
// within the bf16_mixed tolerances of each other (the stored values are rounded once more); an
// fp32 run never stores bf16 and asking it to is refused.
void check_bf16_activation_storage(const std::string& fixture, double fp32_u) {
  const std::string dir = fixture_dir(fixture);
  const auto loaded = model::load_hf_model(dir);
  config::ModelArchitecture architecture = loaded->architecture();
  architecture.num_experts_per_tok = architecture.num_experts;  // no routing flip (as above)
  const auto sequences = model::read_batch_json(dir + "/batch.json");
  const auto packed = model::pack_sequences(sequences);
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  const model::PackedBin on_device = device_bin(packed.bin);
  const double u = 0x1p-8;
  for (const bool recompute : {false, true}) {
    model::ModelOptions options = loaded->options();
    options.device = Device::cuda;
    options.precision = ops::ComputePrecision::bf16;
    options.recompute_full = recompute;
    options.bf16_activations = false;
    model::Qwen3MoeModel fp32_storage(architecture, options);
    options.bf16_activations = true;
    model::Qwen3MoeModel bf16_storage(architecture, options);
    fp32_storage.parameters().copy_values_from(loaded->parameters());
    bf16_storage.parameters().copy_values_from(loaded->parameters());
    const Step want = run_step(fp32_storage, on_device, loss_tokens);
    const Step got = run_step(bf16_storage, on_device, loss_tokens);
    const double kept = static_cast<double>(fp32_storage.activation_high_water_bytes());
    const double bf16 = static_cast<double>(bf16_storage.activation_high_water_bytes());
    std::string worst_name;
    const double worst =
        worst_tensor_error(fp32_storage.parameters(), got.grads, want.grads, worst_name);
    const double loss = std::abs(got.loss_sum - want.loss_sum) / std::abs(want.loss_sum);
    const std::string name = fixture + (recompute ? " (recompute full)" : "");
    std::printf(
        "  %s: arena high-water %.0f bytes with bf16 activations, %.0f with fp32 (%.3f); "
        "loss %.2e, worst gradient %s %.2e\n",
        name.c_str(), bf16, kept, bf16 / kept, loss, worst_name.c_str(), worst);
    expect(bf16 < kept, name + ": bf16 activations lower the arenas' high-water mark");
    expect(loss <= 2 * u, name + ": loss within 2u of fp32 storage");
    expect(worst <= fp32_u * u, name + ": every gradient tensor within the bf16_mixed bound");
  }
  model::ModelOptions fp32_run = loaded->options();
  fp32_run.device = Device::cuda;
  expect(!model::Qwen3MoeModel(architecture, fp32_run).bf16_activations(),
         fixture + ": an fp32 run stores fp32 activations");
  fp32_run.bf16_activations = true;
  bool refused = false;
  try {
    model::Qwen3MoeModel refused_model(architecture, fp32_run);
  } catch (const core::Error&) {
    refused = true;
  }
  expect(refused, fixture + ": bf16 activations without bf16 products are refused");
}

GPU_TEST(bf16_activations_lower_the_high_water) {
  ops::cuda::install_backend();
  check_bf16_activation_storage("qwen3_moe_a", 32);
  check_bf16_activation_storage("qwen3_5_moe_b", 48);
}

}  // namespace
}  // namespace dyncp::gpu_test
