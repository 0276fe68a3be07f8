// The MoE layer's GPU kernels: the fused dispatch (ops::route_and_permute, kernels/
// moe_dispatch.hpp) against the CPU's router + plan + permutation bit for bit, and a whole model
// step with model.moe_grouped_gemm / model.moe_permute_fusion on and off, against the CPU step in
// fp32 and bf16_mixed. Under emulation the step also counts what the keys promise: with both on
// the MoE layers copy nothing to the host (what remains is named below) and each expert
// projection is one launch per layer and direction; with both off the old per-expert path runs.
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "device_bin.hpp"
#include "gpu_test.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"
#include "ops/cuda/cuda_backend.hpp"
#include "ops/permute.hpp"
#ifdef DYNCP_CUDA_EMULATION
#include "emulation_counters.h"
#endif

namespace dyncp::gpu_test {
namespace {

using core::Device;

template <typename T>
std::vector<T> host_values(const Tensor& t) {
  std::vector<T> out(static_cast<std::size_t>(t.numel()));
  Tensor::view_of(out.data(), t.shape(), t.dtype()).copy_from(t);
  return out;
}

// route_and_permute on the device equals router_forward + build_permute_plan + permute_forward
// on the CPU, every output bit for bit (the routing arithmetic is the router kernel's, which
// equals the CPU op's under emulation; on a GPU expf may differ in the last bit, so the probs
// get the fp32 tolerance there and the integer outputs must still agree on these tie-free
// logits).
void check_route_and_permute(std::int64_t tokens, int experts, int top_k, bool normalize,
                             bool device_offsets) {
  ops::cuda::install_backend();
  const std::int64_t hidden = 40, assignments = tokens * top_k;
  std::vector<float> logits = random_floats(tokens * experts, 300 + tokens, -3.0f, 3.0f);
  std::vector<float> x = random_floats(tokens * hidden, 400 + tokens);
  std::vector<std::int32_t> ids(assignments), order(assignments), row(assignments);
  std::vector<float> weights(assignments), probs(tokens * experts), x_perm(assignments * hidden);
  std::vector<std::int64_t> offsets(experts + 1);
  {
    ops::RouterSaved saved{view(probs, {tokens, experts})};
    ops::PermutePlan plan{view(order, {assignments}), view(row, {assignments}),
                          view(offsets, {experts + 1}), Tensor{}};
    ops::route_and_permute(ops::OpContext{}, view(logits, {tokens, experts}), top_k, normalize,
                           view(x, {tokens, hidden}), view(ids, {tokens, top_k}),
                           view(weights, {tokens, top_k}), saved, plan,
                           view(x_perm, {assignments, hidden}));
  }
  core::Arena arena("dispatch", std::size_t{16} << 20, Device::cuda);
  core::Arena host_arena("dispatch host");
  ops::OpContext ctx;
  ctx.device = Device::cuda;
  ctx.scratch = &arena;
  const auto upload = [&](std::vector<float>& values, const core::Shape& shape) {
    const Tensor t = arena.allocate(shape, DType::f32);
    t.copy_from(view(values, shape));
    return t;
  };
  const Tensor d_logits = upload(logits, {tokens, experts}), d_x = upload(x, {tokens, hidden});
  const Tensor d_ids = arena.allocate({tokens, top_k}, DType::i32);
  const Tensor d_weights = arena.allocate({tokens, top_k}, DType::f32);
  const Tensor d_x_perm = arena.allocate({assignments, hidden}, DType::f32);
  ops::RouterSaved d_saved{arena.allocate({tokens, experts}, DType::f32)};
  ops::PermutePlan d_plan{
      arena.allocate({assignments}, DType::i32), arena.allocate({assignments}, DType::i32),
      (device_offsets ? arena : host_arena).allocate({experts + 1}, DType::i64), Tensor{}};
  ops::route_and_permute(ctx, d_logits, top_k, normalize, d_x, d_ids, d_weights, d_saved, d_plan,
                         d_x_perm);
  const std::string name = "route_and_permute T=" + std::to_string(tokens) +
                           " E=" + std::to_string(experts) + " k=" + std::to_string(top_k) +
                           (normalize ? " normalised" : "") +
                           (device_offsets ? ", device offsets: " : ", host offsets: ");
  expect(host_values<std::int32_t>(d_ids) == ids, name + "expert ids equal the CPU's");
  expect(host_values<std::int32_t>(d_plan.expert_order) == order, name + "the order equals");
  expect(host_values<std::int32_t>(d_plan.assignment_row) == row, name + "the inverse equals");
  expect(host_values<std::int64_t>(d_plan.expert_offsets) == offsets, name + "offsets equal");
  expect(host_values<float>(d_x_perm) == x_perm, name + "the permuted rows equal, bit for bit");
  expect_close(name + "weights", to_host(d_weights), weights, kF32AtolRel, kF32Rtol);
  expect_close(name + "probs", to_host(d_saved.probs), probs, kF32AtolRel, kF32Rtol);
}

GPU_TEST(route_and_permute_matches_cpu) {
  check_route_and_permute(300, 12, 3, true, true);   // 3 blocks of 128 tokens, the last partial
  check_route_and_permute(128, 8, 2, false, false);  // exactly one block; offsets to the host
  check_route_and_permute(1, 5, 5, true, true);      // every expert, one token
  check_route_and_permute(0, 4, 2, true, true);      // an empty bin: zero offsets
}

struct Step {
  model::BinResult result;
  std::vector<float> grads;
  unsigned long long d2h_copies = 0, grouped_row_launches = 0, grouped_weight_launches = 0,
                     dispatch_launches = 0, plan_launches = 0;
};

Step run_step(model::Qwen3MoeModel& m, const model::PackedBin& bin, std::int64_t loss_tokens) {
  model::BinOptions options;
  options.loss_grad_scale = 1.0 / static_cast<double>(loss_tokens);
  model::LocalSeams seams;
  m.parameters().zero_grads();
  Step out;
#ifdef DYNCP_CUDA_EMULATION
  const auto count = [] {
    return std::vector<unsigned long long>{emulation::runtime_counters().device_to_host_copies,
                                           emulation::launches_named("grouped_rows_kernel"),
                                           emulation::launches_named("grouped_weight_grad_kernel"),
                                           emulation::launches_named("route_count_kernel"),
                                           emulation::launches_named("permute_plan_kernel")};
  };
  const auto before = count();
#endif
  out.result = m.run_bin(bin, seams.seams(), options);
#ifdef DYNCP_CUDA_EMULATION
  const auto after = count();
  out.d2h_copies = after[0] - before[0];
  out.grouped_row_launches = after[1] - before[1];
  out.grouped_weight_launches = after[2] - before[2];
  out.dispatch_launches = after[3] - before[3];
  out.plan_launches = after[4] - before[4];
#endif
  out.grads = to_host(m.parameters().all_grads());
  return out;
}

void check_moe_kernels_step(ops::ComputePrecision precision) {
  ops::cuda::install_backend();
  const std::string dir = std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/model/qwen3_moe_a";
  model::ModelOptions options;
  options.precision = precision;
  const auto cpu_model = model::load_hf_model(dir, options);
  const auto sequences = model::read_batch_json(dir + "/batch.json");
  const auto packed = model::pack_sequences(sequences);
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  const model::PackedBin on_device = device_bin(packed.bin);
  std::int64_t moe_layers = 0;
  for (std::int64_t l = 0; l < cpu_model->architecture().num_hidden_layers; ++l)
    moe_layers += cpu_model->architecture().is_moe_layer(l) ? 1 : 0;

  options.device = Device::cuda;
  model::Qwen3MoeModel fused(cpu_model->architecture(), options);  // the defaults: both on
  fused.parameters().copy_values_from(cpu_model->parameters());
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
  model::Qwen3MoeModel with_aux(cpu_model->architecture(), options);
  with_aux.parameters().copy_values_from(cpu_model->parameters());
  options.aux_loss = ops::MoeAuxLossType::none;
  options.moe_grouped_gemm = false;
  options.moe_permute_fusion = false;
  model::Qwen3MoeModel per_expert(cpu_model->architecture(), options);
  per_expert.parameters().copy_values_from(cpu_model->parameters());

  const bool bf16 = precision == ops::ComputePrecision::bf16;
  const std::string name = std::string("qwen3_moe_a ") + (bf16 ? "bf16_mixed" : "fp32");
  const Step want = run_step(*cpu_model, packed.bin, loss_tokens);
  const Step got = run_step(fused, on_device, loss_tokens);
  const Step old_path = run_step(per_expert, on_device, loss_tokens);
  const Step aux = run_step(with_aux, on_device, loss_tokens);
  expect(aux.result.aux_loss > 0, name + ": the aux loss is on");
  // fp32: the GPU step's tolerance; bf16_mixed: both sides round the same operands, the
  // accumulation order differs (docs/precision.md).
  const double rtol = bf16 ? 1e-3 : 1e-5, grad_atol = bf16 ? kBf16AtolRel : 1e-5,
               grad_rtol = bf16 ? kBf16Rtol : 1e-4;
  for (const auto& [label, step] :
       {std::pair{" grouped + fused", &got}, std::pair{" per-expert + unfused", &old_path}}) {
    expect_close(name + label + ": loss sum", {static_cast<float>(step->result.loss_sum)},
                 {static_cast<float>(want.result.loss_sum)}, 0.0, rtol);
    expect_close(name + label + ": every gradient", step->grads, want.grads, grad_atol, grad_rtol);
  }
#ifdef DYNCP_CUDA_EMULATION
  // Outside the MoE layers a step copies four scalars down: the embedding's bad-token flag and
  // the cross-entropy's bad-label flag, loss sum and loss-token count.
  constexpr unsigned long long kOutsideMoe = 4;
  expect(got.d2h_copies == kOutsideMoe,
         name + ": with both keys on the MoE layers copy nothing to the host (" +
             std::to_string(got.d2h_copies) + " copies in the step, " +
             std::to_string(kOutsideMoe) + " outside the MoE layers)");
  const auto layers = static_cast<unsigned long long>(moe_layers);
  // The aux loss: every MoE layer's value stays in device memory, one copy per bin brings them.
  expect(aux.d2h_copies == kOutsideMoe + 1,
         name + ": with the aux loss one more copy per step, whatever the layer count (" +
             std::to_string(aux.d2h_copies) + " copies)");
  // Per MoE layer and the forward: gate/up and down; backward: their data gradients (rows
  // kernel) and weight gradients.
  expect(got.grouped_row_launches == 4 * layers && got.grouped_weight_launches == 2 * layers,
         name + ": one grouped launch per projection, layer and direction (" +
             std::to_string(got.grouped_row_launches) + " row and " +
             std::to_string(got.grouped_weight_launches) + " weight-gradient launches, " +
             std::to_string(layers) + " MoE layers)");
  expect(got.dispatch_launches == layers && got.plan_launches == 0,
         name + ": the fused dispatch routes each MoE layer once, no separate plan");
  // Both off: today's path, the offsets and the plan's id check come down in every MoE layer.
  expect(old_path.grouped_row_launches == 0 && old_path.grouped_weight_launches == 0 &&
             old_path.dispatch_launches == 0 && old_path.plan_launches == layers,
         name + ": with both keys off no grouped or fused kernel runs");
  expect(old_path.d2h_copies == kOutsideMoe + 2 * layers,
         name + ": with both keys off each MoE layer copies its plan flag and offsets down (" +
             std::to_string(old_path.d2h_copies) + " copies)");
  // Each key on its own selects its own kernels.
  for (const bool grouped : {true, false}) {
    model::ModelOptions one = options;
    one.moe_grouped_gemm = grouped;
    one.moe_permute_fusion = !grouped;
    model::Qwen3MoeModel m(cpu_model->architecture(), one);
    m.parameters().copy_values_from(cpu_model->parameters());
    const Step step = run_step(m, on_device, loss_tokens);
    const std::string which = name + (grouped ? " grouped only" : " fused only");
    expect_close(which + ": every gradient", step.grads, want.grads, grad_atol, grad_rtol);
    expect((step.grouped_row_launches == (grouped ? 4 * layers : 0)) &&
               (step.grouped_weight_launches == (grouped ? 2 * layers : 0)) &&
               (step.dispatch_launches == (grouped ? 0 : layers)) &&
               (step.plan_launches == (grouped ? layers : 0)),
           which + ": the grouped and the fused kernels run exactly when their key is on");
    // grouped only: the unfused plan's id check comes down; fused only: the host offsets.
    expect(step.d2h_copies == kOutsideMoe + layers,
           which + ": one copy down per MoE layer (" + std::to_string(step.d2h_copies) + ")");
  }
#endif
}

GPU_TEST(moe_kernels_model_step_fp32) {
  check_moe_kernels_step(ops::ComputePrecision::fp32);
}

GPU_TEST(moe_kernels_model_step_bf16) {
  check_moe_kernels_step(ops::ComputePrecision::bf16);
}

}  // namespace
}  // namespace dyncp::gpu_test
