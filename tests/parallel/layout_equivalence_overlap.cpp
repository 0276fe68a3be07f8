// The overlap keys against a run without them, for the layout equivalence tool.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "layout_equivalence_support.hpp"

namespace dyncp::equivalence {
namespace {

// Which overlap keys the second run of compare_overlap turns on.
struct OverlapKeys {
  bool grad_reduce = false, param_gather = false, shared_expert = false;
};

OverlapKeys overlap_keys_of(const Options& options) {
  OverlapKeys keys;
  if (options.overlap_keys.empty()) {
    return {true, options.distributed_optimizer, options.hybrid};
  }
  for (std::size_t at = 0; at <= options.overlap_keys.size();) {
    const std::size_t comma =
        std::min(options.overlap_keys.find(',', at), options.overlap_keys.size());
    const std::string key = options.overlap_keys.substr(at, comma - at);
    if (key == "grad_reduce") {
      keys.grad_reduce = true;
    } else if (key == "param_gather") {
      keys.param_gather = true;
    } else if (key == "shared_expert") {
      keys.shared_expert = true;
    } else {
      throw std::runtime_error("--overlap-keys: grad_reduce, param_gather or shared_expert, not " +
                               key);
    }
    at = comma + 1;
  }
  if (keys.param_gather && !options.distributed_optimizer)
    throw std::runtime_error("--overlap-keys param_gather needs --distributed-optimizer 1");
  if (keys.shared_expert && !options.hybrid)
    throw std::runtime_error("--overlap-keys shared_expert needs --model qwen3_5_moe");
  return keys;
}

}  // namespace

void compare_overlap(const Options& options, const config::ModelArchitecture& architecture,
                     const model::ModelOptions& model_options, dist::ParallelState& parallel_state,
                     const data::SampleSource& source, const train::StepEngineOptions& base_options,
                     const std::vector<std::int64_t>& ids, const Check& check) {
  const OverlapKeys keys = overlap_keys_of(options);
  model::ModelOptions overlap_model_options = model_options;
  overlap_model_options.moe_shared_expert_overlap = keys.shared_expert;
  model::Qwen3MoeModel plain_model(architecture, model_options);
  model::Qwen3MoeModel overlap_model(architecture, overlap_model_options);
  plain_model.parameters().init_random(7);
  overlap_model.parameters().init_random(7);
  train::StepEngineOptions overlap_options = base_options;
  overlap_options.overlap_grad_reduce = keys.grad_reduce;
  overlap_options.overlap_param_gather = keys.param_gather;
  overlap_options.bucket_elements = options.bucket_size;
  train::StepEngine plain(plain_model, parallel_state, source, base_options);
  train::StepEngine overlapped(overlap_model, parallel_state, source, overlap_options);
  const bool sharded = options.distributed_optimizer;
  check(keys.grad_reduce == (overlapped.overlapped_reduce() != nullptr) &&
            keys.param_gather == (overlapped.overlapped_parameter_gather() != nullptr),
        "the overlapped reduction and gather are built exactly when their keys are on");
  train::AdamWSettings adamw;
  adamw.eps = 1e-6;
  const auto optimizer_for = [&](model::Qwen3MoeModel& model, train::StepEngine& engine) {
    return sharded ? train::AdamWOptimizer(model.parameters(), *engine.sharded_state_sync(), adamw)
                   : train::AdamWOptimizer(model.parameters(), engine.partition(), adamw);
  };
  train::AdamWOptimizer plain_optimizer = optimizer_for(plain_model, plain);
  train::AdamWOptimizer overlap_optimizer = optimizer_for(overlap_model, overlapped);
  const auto& ranges =
      sharded ? plain.sharded_state_sync()->shards().owned_ranges : plain.partition().ranges;
  const auto differing_elements = [](const std::vector<float>& a, const std::vector<float>& b,
                                     std::int64_t offset, std::int64_t count) {
    std::int64_t differing = 0;
    for (std::int64_t i = offset; i < offset + count; ++i)
      differing += std::memcmp(&a[static_cast<std::size_t>(i)], &b[static_cast<std::size_t>(i)],
                               sizeof(float)) != 0;
    return differing;
  };
  int differing_steps = 0;
  std::int64_t started_during_backward = 0, waited_by_layer = 0, exchanges_beside = 0;
  for (int step = 1; step <= options.overlap_steps; ++step) {
    const train::StepOutcome a = plain.forward_backward(ids);
    const train::StepOutcome b = overlapped.forward_backward(ids);
    if (overlapped.overlapped_reduce())
      started_during_backward += overlapped.overlapped_reduce()->started_during_backward();
    if (overlapped.overlapped_parameter_gather())
      waited_by_layer += overlapped.overlapped_parameter_gather()->waited_by_layer();
    exchanges_beside += overlapped.seam_counters().exchanges_with_work_beside;
    const std::vector<float> ga = host_floats(plain_model.parameters().all_grads());
    const std::vector<float> gb = host_floats(overlap_model.parameters().all_grads());
    std::int64_t differing = 0;
    for (const auto& range : ranges)
      differing += differing_elements(ga, gb, range.offset, range.count);
    const bool same_loss =
        std::memcmp(&a.loss, &b.loss, sizeof(double)) == 0 &&
        std::memcmp(&a.grad_sum_of_squares, &b.grad_sum_of_squares, sizeof(double)) == 0;
    plain_optimizer.step(1e-2, step, 1.0);
    overlap_optimizer.step(1e-2, step, 1.0);
    // After the last update, the parameters every rank holds (the gathered ones included; the
    // earlier steps' gathers are proved by the next forward's numbers, which must wait for
    // them layer by layer rather than here).
    std::int64_t differing_values = 0;
    if (step == options.overlap_steps) {
      overlapped.complete_parameter_gather();
      const std::vector<float> pa = host_floats(plain_model.parameters().all_values());
      const std::vector<float> pb = host_floats(overlap_model.parameters().all_values());
      differing_values = differing_elements(pa, pb, 0, static_cast<std::int64_t>(pa.size()));
    }
    std::int64_t local[3] = {differing, same_loss ? 0 : 1, differing_values};
    parallel_state.pool().all_reduce(local, local, 3, core::DType::i64, dist::ReduceOp::sum);
    if (local[0] + local[1] + local[2] > 0) ++differing_steps;
    char line[240];
    std::snprintf(line, sizeof line,
                  "overlap step %d: loss %.9g vs %.9g, %lld gradient elements and %lld parameters "
                  "differ over the pool",
                  step, a.loss, b.loss, static_cast<long long>(local[0]),
                  static_cast<long long>(local[2]));
    if (!options.overlap_expect_mismatch)
      check(local[0] == 0 && local[1] == 0 && local[2] == 0, line);
    else if (parallel_state.rank() == 0)
      std::printf("%s\n", line);
  }
  if (parallel_state.rank() == 0) {
    std::printf(
        "overlap over %d steps: %lld buckets started during the backward, %lld gathered buckets "
        "waited for layer by layer, %lld EP exchanges with the shared expert beside them\n",
        options.overlap_steps, static_cast<long long>(started_during_backward),
        static_cast<long long>(waited_by_layer), static_cast<long long>(exchanges_beside));
  }
  if (keys.grad_reduce) {
    check(started_during_backward > 0,
          "buckets started during the backward: " + std::to_string(started_during_backward));
  }
  if (keys.param_gather) {
    check(waited_by_layer > 0, "gathered buckets waited for layer by layer in the forward: " +
                                   std::to_string(waited_by_layer));
  }
  if (keys.shared_expert && options.ep > 1) {
    check(exchanges_beside > 0,
          "EP exchanges with the shared expert beside them: " + std::to_string(exchanges_beside));
  }
  if (options.overlap_expect_mismatch) {
    check(differing_steps > 0, "the overlap without its event gives other numbers in " +
                                   std::to_string(differing_steps) + " of " +
                                   std::to_string(options.overlap_steps) + " steps");
  }
}

}  // namespace dyncp::equivalence
