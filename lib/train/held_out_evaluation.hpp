#pragma once
// Evaluation on held-out data (validation.eval_interval, validation.eval_iters): the same
// batches every time (a fresh single-pass sampler over the validation set), forward only, on
// the training layout and schedule rules.

#include <cstdint>
#include <functional>
#include <memory>

#include "config/config_container.hpp"
#include "dist/parallel_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "parallel/parallel_plan.hpp"
#include "train/step_engine.hpp"
#include "train/training_data.hpp"

namespace dyncp::train {

class HeldOutEvaluation {
 public:
  // Opens the validation data; a data error when a sample cannot fit the largest CP group.
  HeldOutEvaluation(const config::ConfigContainer& config, const parallel::ParallelPlan& plan,
                    model::Qwen3MoeModel& model, dist::ParallelState& parallel_state,
                    const StepEngineOptions& training_options);

  // After `iteration` steps: every eval_interval steps and after the last one.
  bool due(std::int64_t iteration) const;
  // The token-mean loss over eval_iters held-out batches, after the parameters' pending writes.
  // Collective over the world.
  double loss();
  // What must finish before the parameters may be read (ddp.overlap_param_gather: the training
  // engine's StepEngine::complete_parameter_gather).
  void set_pending_writes(std::function<void()> complete) { complete_ = std::move(complete); }

 private:
  const config::ConfigContainer& config_;
  TrainingData data_;
  std::unique_ptr<StepEngine> engine_;
  std::function<void()> complete_;
};

// A HeldOutEvaluation when the recipe evaluates (eval_interval set and eval_iters > 0; eval_iters
// 0 with an interval is warned about by the config), else null.
std::unique_ptr<HeldOutEvaluation> make_held_out_evaluation(
    const config::ConfigContainer& config, const parallel::ParallelPlan& plan,
    model::Qwen3MoeModel& model, dist::ParallelState& parallel_state,
    const StepEngineOptions& training_options);

}  // namespace dyncp::train
