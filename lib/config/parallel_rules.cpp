// Rules for the parallel layout and global-batch packing, after Megatron-Bridge's
// ConfigContainer.validate and MCore's dynamic-CP checks, plus this program's own limits
// (training runs TP = 1; tensor parallelism's own rules are in
// tensor_parallel_rules.cpp). Every rule names the key, the value, the rule and the fix.

#include <algorithm>
#include <string>
#include <vector>

#include "config/head_sharding.hpp"
#include "config/pipeline_split.hpp"
#include "config/validation_rules.hpp"

namespace dyncp::config::detail {

namespace {

std::string str(std::int64_t value) {
  return std::to_string(value);
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

std::string list_text(const std::vector<std::int64_t>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i)
    text += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  return text + "]";
}

// a2a+p2p needs [inner, outer] with inner x outer = cp; the sizes mean nothing to the other
// exchanges, so they are refused there rather than ignored. Returns the inner size (0: none).
std::int64_t check_hierarchical_sizes(const ModelConfig& model, ProblemList& problems) {
  const auto& sizes = model.hierarchical_context_parallel_sizes;
  const std::string key = "model.hierarchical_context_parallel_sizes";
  if (model.cp_comm_type != CpCommType::a2a_p2p) {
    if (!sizes.empty()) {
      problems.add(key, list_text(sizes),
                   "is used only by model.cp_comm_type=a2a+p2p (it is " +
                       std::string(to_string(model.cp_comm_type)) +
                       "); remove it or set cp_comm_type=a2a+p2p");
    }
    return 0;
  }
  const std::int64_t cp = model.context_parallel_size;
  if (sizes.size() != 2 || sizes[0] < 1 || sizes[1] < 1) {
    problems.add(key, sizes.empty() ? "null" : list_text(sizes),
                 "model.cp_comm_type=a2a+p2p needs two positive sizes [inner, outer] (all-to-all "
                 "inside groups of inner ranks, a ring over outer of them) with inner x outer = "
                 "context_parallel_size " +
                     str(cp) + "; e.g. [" + str(cp >= 2 ? 2 : 1) + ", " +
                     str(cp >= 2 ? cp / 2 : 1) + "]");
    return 0;
  }
  if (sizes[0] * sizes[1] != cp) {
    problems.add(key, list_text(sizes),
                 "inner x outer = " + str(sizes[0] * sizes[1]) +
                     " must equal model.context_parallel_size " + str(cp));
    return 0;
  }
  if (model.dynamic_context_parallel && !is_power_of_two(sizes[0])) {
    problems.add(key, list_text(sizes),
                 "the inner size must be a power of two with dynamic CP (every dynamic group "
                 "size is one)");
    return 0;
  }
  return sizes[0];
}

// Every all-to-all group the layout can form must be able to share the heads
// (config/head_sharding.hpp): a2a uses the whole runtime group, a2a+p2p min(c, inner).
void check_head_sharding(const ModelConfig& model, const std::vector<std::int64_t>& group_sizes,
                         std::int64_t inner, ProblemList& problems) {
  const bool a2a = model.cp_comm_type == CpCommType::a2a;
  if (!a2a && !(model.cp_comm_type == CpCommType::a2a_p2p && inner > 0)) return;
  const ModelArchitecture& arch = model.architecture;
  std::vector<std::int64_t> a2a_sizes;
  for (const std::int64_t c : group_sizes) {
    const std::int64_t size = a2a ? c : std::min(c, inner);
    if (size > 1 && std::find(a2a_sizes.begin(), a2a_sizes.end(), size) == a2a_sizes.end())
      a2a_sizes.push_back(size);
  }
  const std::string value = to_string(model.cp_comm_type);
  for (const std::int64_t size : a2a_sizes) {
    const std::string where = a2a ? "a CP group of " + str(size) + " ranks"
                                  : "an all-to-all group of " + str(size) + " ranks";
    // Under TP the all-to-all divides the heads of one TP rank.
    const std::int64_t tp = std::max<std::int64_t>(model.tensor_model_parallel_size, 1);
    std::string problem =
        head_sharding_problem(arch.num_attention_heads / tp, arch.num_key_value_heads / tp, size);
    if (!problem.empty()) {
      problems.add("model.cp_comm_type", value,
                   "model.num_attention_heads " + str(arch.num_attention_heads) +
                       " and model.num_key_value_heads " + str(arch.num_key_value_heads) +
                       " cannot be divided over " + where + " (" + problem +
                       "); use a group size the heads allow, cp_comm_type all_gather or p2p" +
                       (a2a ? std::string(", or a2a+p2p with a smaller inner size") : ""));
      return;
    }
    if (!arch.is_hybrid()) continue;
    problem = head_sharding_problem(arch.linear_num_value_heads / tp,
                                    arch.linear_num_key_heads / tp, size);
    if (!problem.empty()) {
      problems.add("model.cp_comm_type", value,
                   "the Gated DeltaNet heads (model.linear_num_value_heads " +
                       str(arch.linear_num_value_heads) + ", model.linear_num_key_heads " +
                       str(arch.linear_num_key_heads) + ") cannot be divided over " + where + " (" +
                       problem + "); use cp_comm_type all_gather or p2p");
      return;
    }
  }
}

void check_packing_switches(ConfigContainer& config, ProblemList& problems) {
  const auto& model = config.model;
  if (config.train.micro_batch_size != 1) {
    problems.add("train.micro_batch_size", str(config.train.micro_batch_size),
                 "must be 1: the loader yields one unpacked sample per microbatch and the "
                 "packing scheduler builds the bins; set it to 1");
  }
  if (!model.calculate_per_token_loss) {
    problems.add("model.calculate_per_token_loss", "false",
                 "must be true: with packed bins and variable CP groups the loss is a per-token "
                 "sum normalised by the global token count; set it to true");
  }
  if (config.ddp.overlap_param_gather &&
      (!config.ddp.use_distributed_optimizer || !config.ddp.overlap_grad_reduce)) {
    problems.add("ddp.overlap_param_gather", "true",
                 std::string("needs ") +
                     (!config.ddp.use_distributed_optimizer
                          ? "ddp.use_distributed_optimizer=true (the replicated optimizer "
                            "gathers no parameters)"
                          : "ddp.overlap_grad_reduce=true (as in Megatron: the gather uses its "
                            "buckets)") +
                     "; set it or set ddp.overlap_param_gather=false");
  }
  if (config.ddp.average_in_collective) {
    problems.add("ddp.average_in_collective", "true",
                 "must be false with per-token loss (averaging would divide gradients by the "
                 "group size a second time); set it to false");
  }
  const auto loader = config.dataset.dataloader_type;
  if (loader != DataloaderType::single && loader != DataloaderType::cyclic) {
    problems.add("dataset.dataloader_type", to_string(loader),
                 "must be single or cyclic: the packing scheduler needs one sample per loader "
                 "microbatch");
  }
  if (!config.dataset.enable_global_batch_packing) {
    problems.add("dataset.enable_global_batch_packing", "false",
                 "global-batch packing is the only data path: each step's samples are packed "
                 "online into bins across the dp x cp pool (offline and in-batch packing are not "
                 "implemented); set it to true");
    if (model.sequence_packing_scheduler) {
      problems.add("model.sequence_packing_scheduler", to_string(*model.sequence_packing_scheduler),
                   "a packing scheduler runs only with dataset.enable_global_batch_packing=true");
    }
  }
  if (config.dist.use_decentralized_pg) {
    problems.add("dist.use_decentralized_pg", "true",
                 "must be false: dynamic CP groups are looked up in the parallel state, which "
                 "decentralized process groups do not create; set it to false");
  }
}

void resolve_scheduler(ModelConfig& model, ProblemList& problems) {
  const bool dynamic = model.dynamic_context_parallel;
  if (!model.sequence_packing_scheduler) {
    model.sequence_packing_scheduler =
        dynamic ? PackingScheduler::default_dynamic_cp : PackingScheduler::dp_balanced;
    return;
  }
  const auto scheduler = *model.sequence_packing_scheduler;
  if (dynamic && scheduler == PackingScheduler::dp_balanced) {
    problems.add("model.sequence_packing_scheduler", "dp_balanced",
                 "contradicts model.dynamic_context_parallel=true (dp_balanced runs static CP); "
                 "use default_dynamic_cp or cost_aware, or set "
                 "model.dynamic_context_parallel=false");
  } else if (!dynamic && scheduler != PackingScheduler::dp_balanced) {
    problems.add("model.sequence_packing_scheduler", to_string(scheduler),
                 "is a dynamic-CP scheduler but model.dynamic_context_parallel=false; use "
                 "dp_balanced, or set model.dynamic_context_parallel=true");
  }
}

}  // namespace

// The pipeline's split of the layers, the world's pp factor, and the interleaved schedule's
// microbatch rule. Returns the ranks of one stage (world / pp; the world when pp does not
// divide it, so the later rules still run).
std::int64_t check_pipeline(const ConfigContainer& config, std::int64_t world_size,
                            ProblemList& problems) {
  const auto& model = config.model;
  for (const auto& problem : pipeline_split_problems(pipeline_split_input(model)))
    problems.add(problem.key, problem.value, problem.rule);
  const std::int64_t pp = model.pipeline_model_parallel_size;
  if (pp < 1) return world_size;
  if (world_size % pp != 0) {
    problems.add("model.pipeline_model_parallel_size", str(pp),
                 "must divide the world size " + str(world_size) +
                     " (world = pp x dp x cp); launch a multiple of " + str(pp) + " ranks");
    return world_size;
  }
  return world_size / pp;
}

// Interleaved 1F1B runs a step's microbatches in groups of pp (packing/pipeline_schedule.hpp);
// the scheduler can give a step at most global_batch_size microbatches under dynamic CP (one
// sample on the whole pool each) and global_batch_size / dp with static CP.
void check_pipeline_microbatches(const ConfigContainer& config, std::int64_t dp,
                                 ProblemList& problems) {
  const auto& model = config.model;
  const std::int64_t pp = model.pipeline_model_parallel_size;
  const std::int64_t vpp = model.virtual_pipeline_model_parallel_size.value_or(1);
  if (pp <= 1 || vpp <= 1 || dp < 1) return;
  const std::int64_t gbs = config.train.global_batch_size;
  const std::int64_t most = model.dynamic_context_parallel ? gbs : gbs / dp;
  if (most < pp) {
    problems.add(
        "train.global_batch_size", str(gbs),
        "interleaved 1F1B (model.virtual_pipeline_model_parallel_size " + str(vpp) +
            ") needs at least pp = " + str(pp) +
            " microbatches per step, and this batch can form at most " + str(most) +
            (model.dynamic_context_parallel ? " (one sample each)"
                                            : " (global_batch_size / dp " + str(dp) + ")") +
            "; raise it to at least " + str(model.dynamic_context_parallel ? pp : pp * dp) +
            " or unset the virtual pipeline");
  }
}

// A stage's ranks = tp x cp x dp; the dp x cp pool is the ranks of one TP index. Returns dp, or
// 0 when cp (or tp) does not divide the stage.
std::int64_t data_parallel_size_of(const ModelConfig& model, std::int64_t world_size,
                                   std::int64_t full_world, ProblemList& problems) {
  const std::int64_t cp = model.context_parallel_size;
  const std::int64_t tp = std::max<std::int64_t>(model.tensor_model_parallel_size, 1);
  if (world_size % tp != 0) return 0;  // check_tensor_parallel names it
  const std::int64_t pool_world = world_size / tp;
  if (cp >= 1 && pool_world % cp == 0) return pool_world / cp;
  const bool staged = world_size != full_world;
  if (tp == 1) {
    problems.add("model.context_parallel_size", str(cp),
                 (staged ? "must divide the " + str(world_size) +
                               " ranks of one pipeline stage (dp = world / (pp x cp))"
                         : "must divide the world size " + str(world_size) + " (dp = world / cp)") +
                     "; use a divisor of " + str(world_size) + " or launch a multiple of " +
                     str(cp) + " ranks");
  } else {
    problems.add("model.context_parallel_size", str(cp),
                 (staged ? "must divide " + str(world_size) + " ranks (one pipeline stage) / "
                         : "must divide world " + str(world_size) + " / ") +
                     "tensor_model_parallel_size " + str(tp) + " = " + str(pool_world) +
                     (staged ? " (dp = world / (pp x tp x cp))" : " (dp = world / (tp x cp))") +
                     "; use a divisor of " + str(pool_world) + " or launch a multiple of " +
                     str(tp * cp) + " ranks" + (staged ? " per stage" : ""));
  }
  return 0;
}

void check_parallel_and_packing(ConfigContainer& config, std::int64_t world_size,
                                ProblemList& problems) {
  auto& model = config.model;
  const std::int64_t full_world = world_size;
  // Every rule below is about one stage's ranks (tp x cp x dp; each stage has its own).
  world_size = check_pipeline(config, full_world, problems);
  check_tensor_parallel(config, world_size, problems);
  check_packing_switches(config, problems);
  resolve_scheduler(model, problems);

  const bool dynamic = model.dynamic_context_parallel;
  const std::int64_t cp = model.context_parallel_size;
  const std::int64_t seq_length = model.seq_length;
  const std::int64_t tp = std::max<std::int64_t>(model.tensor_model_parallel_size, 1);
  const std::int64_t dp = data_parallel_size_of(model, world_size, full_world, problems);
  const bool layout_known = dp > 0;
  const std::int64_t pool = dp * cp;
  const std::string pool_text = "dp " + str(dp) + " x cp " + str(cp) + " = " + str(pool);

  check_pipeline_microbatches(config, dp, problems);
  if (layout_known && config.train.global_batch_size % dp != 0) {
    const auto gbs = config.train.global_batch_size;
    problems.add("train.global_batch_size", str(gbs),
                 "must be divisible by dp = " + str(dp) + " (world " + str(world_size) +
                     (tp > 1 ? " / tp " + str(tp) : std::string()) + " / cp " + str(cp) +
                     "); use e.g. " + str(ceil_div(gbs, dp) * dp));
  }

  if (dynamic && layout_known && (pool < 2 || !is_power_of_two(pool))) {
    problems.add("model.dynamic_context_parallel", "true",
                 "needs a dp x cp pool that is a power of two with at least 2 ranks, but the pool "
                 "is " +
                     pool_text +
                     "; run on 2, 4, 8, ... ranks or set "
                     "model.dynamic_context_parallel=false");
  }
  const auto min_size = model.min_dynamic_context_parallel_size;
  if (!is_power_of_two(min_size)) {
    problems.add("model.min_dynamic_context_parallel_size", str(min_size),
                 "must be a power of two (1, 2, 4, ...)");
  } else if (dynamic && layout_known && min_size > pool) {
    problems.add("model.min_dynamic_context_parallel_size", str(min_size),
                 "must be <= the dp x cp pool (" + pool_text + ")");
  }

  // The longest sample must fit the largest group the scheduler can form.
  const std::int64_t capacity_ranks = dynamic ? pool : cp;
  const std::string capacity_text = dynamic ? "pool " + pool_text : "cp " + str(cp);
  if (!model.max_seqlen_per_dp_cp_rank) {
    problems.add("model.max_seqlen_per_dp_cp_rank", "null",
                 "must be set explicitly (it sizes every packed bin and CP group); a starting "
                 "point is seq_length / cp = " +
                     str(ceil_div(seq_length, cp)));
  } else if (layout_known && capacity_ranks * *model.max_seqlen_per_dp_cp_rank < seq_length) {
    const auto capacity = *model.max_seqlen_per_dp_cp_rank;
    problems.add("model.max_seqlen_per_dp_cp_rank", str(capacity),
                 capacity_text + " ranks x " + str(capacity) + " = " +
                     str(capacity_ranks * capacity) + " tokens < model.seq_length " +
                     str(seq_length) +
                     ", so the longest sample could never be scheduled; use "
                     "at least " +
                     str(ceil_div(seq_length, capacity_ranks)));
  }

  const std::int64_t ep = model.expert_model_parallel_size;
  const std::int64_t num_experts = model.architecture.num_experts;
  // Under TP the experts span the world (tensor_parallel_rules.cpp checks etp x ep).
  if (layout_known && tp == 1 && pool % ep != 0) {
    problems.add("model.expert_model_parallel_size", str(ep),
                 "must divide the dp x cp pool (" + pool_text + ")");
  }
  if (num_experts == 0 && ep != 1) {
    problems.add("model.expert_model_parallel_size", str(ep),
                 "a dense model (model.num_experts=0) has no experts to split; set it to 1");
  } else if (num_experts > 0 && num_experts % ep != 0) {
    problems.add("model.expert_model_parallel_size", str(ep),
                 "must divide model.num_experts = " + str(num_experts));
  }

  // Per-sequence alignment: zigzag CP needs every length divisible by 2 x (group size), and
  // every dynamic group size divides the pool.
  std::int64_t alignment = dynamic ? 2 * pool : (cp > 1 ? 2 * cp : 1);
  const bool sequence_parallel = model.sequence_parallel && tp > 1;
  if (sequence_parallel) alignment *= tp;
  const std::string alignment_text =
      std::string(dynamic ? " (2 x dp x cp" : " (2 x cp") + (sequence_parallel ? " x tp)" : ")");
  auto& pad_to = config.dataset.global_batch_packing_pad_to_multiple_of;
  if (layout_known && alignment > 0) {
    if (pad_to && *pad_to % alignment != 0) {
      problems.add("dataset.global_batch_packing_pad_to_multiple_of", str(*pad_to),
                   "must be a multiple of the required alignment " + str(alignment) +
                       (dynamic || cp > 1 ? alignment_text : std::string(" (1 without CP)")) +
                       "; remove it to use the derived value");
    } else if (pad_to && dynamic && config.packing.alignment == PackingAlignment::per_group &&
               *pad_to != alignment) {
      problems.add("dataset.global_batch_packing_pad_to_multiple_of", str(*pad_to),
                   "sets one padding multiple for every sequence, but packing.alignment=per_group "
                   "pads each sequence for its group; remove it, or set packing.alignment=pool");
    } else {
      if (!pad_to) pad_to = alignment;
      if (seq_length % *pad_to != 0) {
        problems.add("model.seq_length", str(seq_length),
                     "must be a multiple of the alignment multiple " + str(*pad_to) +
                         alignment_text + "; use e.g. " +
                         str(ceil_div(seq_length, *pad_to) * *pad_to));
      }
      const auto& dataset_length = config.dataset.seq_length;
      if (dataset_length && *dataset_length % *pad_to != 0) {
        problems.add("dataset.seq_length", str(*dataset_length),
                     "must be a multiple of the alignment multiple " + str(*pad_to));
      }
    }
  }
  if (config.dataset.seq_length && *config.dataset.seq_length > seq_length) {
    problems.add("dataset.seq_length", str(*config.dataset.seq_length),
                 "must be <= model.seq_length " + str(seq_length) +
                     " (remove it to use "
                     "model.seq_length)");
  }

  auto& layout = config.layout;
  layout = ParallelLayout{};
  layout.world_size = full_world;
  layout.pipeline_model_parallel_size =
      std::max<std::int64_t>(model.pipeline_model_parallel_size, 1);
  layout.virtual_pipeline_model_parallel_size =
      std::max<std::int64_t>(model.virtual_pipeline_model_parallel_size.value_or(1), 1);
  layout.data_parallel_size = dp;
  layout.context_parallel_size = cp;
  layout.pool_size = pool;
  layout.expert_model_parallel_size = ep;
  layout.tensor_model_parallel_size = tp;
  layout.expert_tensor_parallel_size = model.expert_tensor_parallel_size.value_or(tp);
  const std::int64_t expert_block = layout.expert_tensor_parallel_size * ep;
  layout.expert_data_parallel_size =
      expert_block > 0 && world_size % expert_block == 0 ? world_size / expert_block : 0;
  layout.alignment_multiple = pad_to.value_or(alignment);
  if (dynamic) {
    for (std::int64_t size = min_size; size > 0 && size <= pool; size *= 2) {
      layout.dynamic_group_sizes.push_back(size);
    }
  } else {
    layout.dynamic_group_sizes.push_back(cp);
  }
  const std::int64_t inner = check_hierarchical_sizes(model, problems);
  if (layout_known) check_head_sharding(model, layout.dynamic_group_sizes, inner, problems);
}

}  // namespace dyncp::config::detail
