#include "train/held_out_evaluation.hpp"

#include "data/sampler.hpp"

namespace dyncp::train {

HeldOutEvaluation::HeldOutEvaluation(const config::ConfigContainer& config,
                                     const parallel::ParallelPlan& plan,
                                     model::Qwen3MoeModel& model,
                                     dist::ParallelState& parallel_state,
                                     const StepEngineOptions& training_options)
    : config_(config), data_(open_validation_data(config)) {
  data::require_samples_fit(*data_.source, plan.largest_group_tokens(),
                            plan.largest_group_multiple(),
                            "the largest CP group's capacity (validation data)");
  StepEngineOptions options = training_options;
  options.overlap_grad_reduce = false;    // forward only: no gradients to reduce
  options.overlap_param_gather = false;   // the training engine's gather (set_pending_writes)
  options.distributed_optimizer = false;  // forward only: no gradients to shard
  engine_ = std::make_unique<StepEngine>(model, parallel_state, *data_.source, options);
}

bool HeldOutEvaluation::due(std::int64_t iteration) const {
  return iteration % *config_.validation.eval_interval == 0 ||
         iteration == config_.train.train_iters;
}

double HeldOutEvaluation::loss() {
  if (complete_) complete_();
  data::SamplerOptions options = sampler_options(config_);
  options.type = data::SamplerType::single;
  data::Sampler held_out(options, data_.source->size());
  double loss_sum = 0;
  std::int64_t loss_tokens = 0;
  for (std::int64_t i = 0; i < config_.validation.eval_iters; ++i) {
    const StepOutcome outcome = engine_->evaluate(held_out.next_global_batch());
    loss_sum += outcome.loss_sum;
    loss_tokens += outcome.loss_tokens;
  }
  return loss_tokens > 0 ? loss_sum / static_cast<double>(loss_tokens) : 0.0;
}

std::unique_ptr<HeldOutEvaluation> make_held_out_evaluation(
    const config::ConfigContainer& config, const parallel::ParallelPlan& plan,
    model::Qwen3MoeModel& model, dist::ParallelState& parallel_state,
    const StepEngineOptions& training_options) {
  if (!config.validation.eval_interval || config.validation.eval_iters <= 0) return nullptr;
  return std::make_unique<HeldOutEvaluation>(config, plan, model, parallel_state, training_options);
}

}  // namespace dyncp::train
