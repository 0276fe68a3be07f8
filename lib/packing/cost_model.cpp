#include "packing/cost_model.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "config/head_sharding.hpp"
#include "packing/pipeline_schedule.hpp"

namespace dyncp::packing {

namespace {

void add_product(ProductFlops& flops, double in, double out, double rows_per_token = 1.0,
                 double copies = 1.0) {
  flops.flops_per_token += 6.0 * in * out * rows_per_token;
  flops.weight_values += in * out * copies;
  flops.row_values_per_token += (in + out) * rows_per_token;
  flops.products += 1.0;
}

}  // namespace

ModelFlopsBreakdown model_flops_breakdown(config::ModelArchitecture a) {
  a.resolve();
  const double h = static_cast<double>(a.hidden_size);
  const double q = static_cast<double>(a.head_dim * a.num_attention_heads);
  const double kv = static_cast<double>(a.head_dim * a.num_key_value_heads);
  const double gate = a.is_hybrid() ? q : 0.0;  // Qwen3.5 full attention has an output gate
  ModelFlopsBreakdown out;
  for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer) {
    if (a.mixer_of_layer(layer) == config::LayerMixer::full_attention) {
      add_product(out.dense, h, q + 2.0 * kv + gate);  // q, k, v (and the gate)
      add_product(out.dense, q, h);                    // o_proj
      out.attention_flops_per_token_squared += 6.0 * q;
      ++out.attention_layers;
    } else {  // Gated DeltaNet, linear in the sequence length
      const double qk = static_cast<double>(a.linear_num_key_heads * a.linear_key_head_dim);
      const double v = static_cast<double>(a.linear_num_value_heads * a.linear_value_head_dim);
      const double value_heads = static_cast<double>(a.linear_num_value_heads);
      const double dv = static_cast<double>(a.linear_value_head_dim);
      const double conv = static_cast<double>(a.linear_conv_kernel_dim);
      add_product(out.dense, h, 2.0 * qk + 2.0 * v);  // in_proj_qkvz
      add_product(out.dense, h, 2.0 * value_heads);   // in_proj_ba
      add_product(out.dense, v, h);                   // out_proj
      out.deltanet_flops_per_token += 6.0 * (conv * (2.0 * qk + v) + 4.0 * value_heads * dv * dv);
      ++out.linear_attention_layers;
    }
    if (a.is_moe_layer(layer)) {
      const double routed = static_cast<double>(a.moe_intermediate_size);
      const double k = static_cast<double>(a.num_experts_per_tok);
      const double experts = static_cast<double>(a.num_experts);
      add_product(out.experts, h, 2.0 * routed, k, experts);  // gate_up
      add_product(out.experts, routed, h, k, experts);        // down
      if (a.shared_expert_intermediate_size > 0) {
        const double shared = static_cast<double>(a.shared_expert_intermediate_size);
        add_product(out.dense, h, 2.0 * shared);
        add_product(out.dense, shared, h);
      }
      ++out.moe_layers;
    } else {
      const double inner = static_cast<double>(a.intermediate_size);
      add_product(out.dense, h, 2.0 * inner);
      add_product(out.dense, inner, h);
    }
  }
  add_product(out.logits, h, static_cast<double>(a.vocab_size));
  return out;
}

ModelCost model_cost_from_architecture(config::ModelArchitecture a) {
  a.resolve();
  const ModelFlopsBreakdown flops = model_flops_breakdown(a);
  const double q = static_cast<double>(a.head_dim * a.num_attention_heads);
  const double kv = static_cast<double>(a.head_dim * a.num_key_value_heads);
  ModelCost cost;
  cost.linear_flops_per_token = flops.linear_flops_per_token();
  cost.attention_flops_per_token_squared = flops.attention_flops_per_token_squared;
  cost.attention_layers = flops.attention_layers;
  cost.kv_bytes_per_token_per_layer = 2.0 * kv * 2.0;  // K and V, 2 bytes each
  cost.query_bytes_per_token_per_layer = q * 2.0;
  cost.query_heads = a.num_attention_heads;
  cost.kv_heads = a.num_key_value_heads;
  cost.sliding_window = a.sliding_window;
  if (a.is_hybrid()) {
    for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer)
      cost.linear_attention_layers +=
          a.mixer_of_layer(layer) == config::LayerMixer::linear_attention;
    const double key_heads = static_cast<double>(a.linear_num_key_heads);
    const double value_heads = static_cast<double>(a.linear_num_value_heads);
    cost.linear_key_bytes_per_token_per_layer =
        2.0 * key_heads * static_cast<double>(a.linear_key_head_dim) * 2.0;
    cost.linear_value_bytes_per_token_per_layer =
        (2.0 * value_heads * static_cast<double>(a.linear_value_head_dim) + 2.0 * value_heads) *
        2.0;
    cost.linear_key_heads = a.linear_num_key_heads;
    cost.linear_value_heads = a.linear_num_value_heads;
    const double dk = static_cast<double>(a.linear_key_head_dim);
    const double dv = static_cast<double>(a.linear_value_head_dim);
    const double tail_rows =
        static_cast<double>(std::max<std::int64_t>(a.linear_conv_kernel_dim - 1, 0));
    const double conv_channels = 2.0 * key_heads * dk + value_heads * dv;  // raw q, k and v
    cost.linear_state_bytes_per_segment_per_layer =
        4.0 *
        (value_heads * dk * (dk + dv) + value_heads * dk * dv + 3.0 * tail_rows * conv_channels);
  }
  return cost;
}

CostModelParameters cost_model_parameters(const config::PackingCostConfig& section) {
  CostModelParameters parameters;
  parameters.device_flops_per_second = section.device_flops_per_second;
  parameters.link_bytes_per_second = section.link_bytes_per_second;
  parameters.collective_latency_seconds = section.collective_latency_seconds;
  parameters.microbatch_overhead_seconds = section.microbatch_overhead_seconds;
  return parameters;
}

CostModelParameters cost_model_parameters(const config::PackingCostConfig& section,
                                          const config::ModelConfig& model) {
  CostModelParameters parameters = cost_model_parameters(section);
  parameters.cp_comm_type = model.cp_comm_type;
  parameters.pipeline_stages = std::max<std::int64_t>(model.pipeline_model_parallel_size, 1);
  parameters.pipeline_virtual_chunks =
      std::max<std::int64_t>(model.virtual_pipeline_model_parallel_size.value_or(1), 1);
  if (!model.hierarchical_context_parallel_sizes.empty())
    parameters.hierarchical_inner_size = model.hierarchical_context_parallel_sizes.front();
  return parameters;
}

config::ModelArchitecture qwen3_30b_a3b_architecture() {
  config::ModelArchitecture a;
  a.model_type = "qwen3_moe";
  a.vocab_size = 151936;
  a.hidden_size = 2048;
  a.intermediate_size = 6144;
  a.num_hidden_layers = 48;
  a.num_attention_heads = 32;
  a.num_key_value_heads = 4;
  a.head_dim = 128;
  a.num_experts = 128;
  a.num_experts_per_tok = 8;
  a.moe_intermediate_size = 768;
  a.norm_topk_prob = true;
  a.resolve();
  return a;
}

double CostModel::attention_flops(std::int64_t length) const {
  const double l = static_cast<double>(length);
  const double w = static_cast<double>(model_.sliding_window);
  // 2·(causal pairs): L² in full, 2Lw − w² once the window is shorter than the sequence.
  const double pairs_twice = model_.sliding_window > 0 && w < l ? 2.0 * l * w - w * w : l * l;
  return model_.attention_flops_per_token_squared * pairs_twice;
}

double CostModel::sequence_flops(std::int64_t length) const {
  return model_.linear_flops_per_token * static_cast<double>(length) + attention_flops(length);
}

double CostModel::compute_seconds(std::int64_t length, std::int64_t group_size) const {
  return sequence_flops(length) /
         (static_cast<double>(group_size) * parameters_.device_flops_per_second);
}

double CostModel::bandwidth(std::int64_t group_size) const {
  return group_size <= parameters_.ranks_per_node ? parameters_.link_bytes_per_second
                                                  : parameters_.network_bytes_per_second;
}

CostModel::ExchangeSeconds CostModel::exchange_seconds(std::int64_t tokens, std::int64_t group_size,
                                                       std::int64_t sequences) const {
  ExchangeSeconds seconds;
  if (group_size <= 1) return seconds;
  const double c = static_cast<double>(group_size);
  const double n = static_cast<double>(tokens);
  const double alpha = parameters_.collective_latency_seconds;
  const double attention = static_cast<double>(model_.attention_layers);
  const double linear = static_cast<double>(model_.linear_attention_layers);
  const double kv = model_.kv_bytes_per_token_per_layer;
  const auto replicas = [](std::int64_t heads, std::int64_t ranks) {
    return static_cast<double>(config::HeadSharding{ranks, heads, heads}.kv_replicas());
  };
  // The all-to-all inside groups of `a` ranks (of a group of c): every rank sends (a−1)/a of
  // its N/c rows' Q, K, V (and out) in forward and their gradients in backward.
  const auto all_to_all = [&](std::int64_t a) {
    if (a <= 1) return;
    const double ranks = static_cast<double>(a);
    const double rows = n / c;
    const double attention_bytes =
        2.0 * model_.query_bytes_per_token_per_layer + replicas(model_.kv_heads, a) * kv;
    const double linear_bytes =
        replicas(model_.linear_key_heads, a) * model_.linear_key_bytes_per_token_per_layer +
        model_.linear_value_bytes_per_token_per_layer;
    seconds.latency += (attention + linear) * 2.0 * alpha;
    seconds.transfer += 2.0 * (ranks - 1.0) / ranks * rows *
                        (attention * attention_bytes + linear * linear_bytes) / bandwidth(a);
  };
  // DeltaNet chunk states passed over `ranks` ranks of the group, each holding 1 / head_split
  // of the value heads.
  const auto state_passing = [&](std::int64_t ranks, std::int64_t head_split) {
    if (ranks <= 1 || linear == 0.0) return;
    seconds.latency += linear * 4.0 * alpha;
    seconds.transfer += linear * static_cast<double>(sequences) * 2.0 *
                        static_cast<double>(ranks - 1) *
                        model_.linear_state_bytes_per_segment_per_layer /
                        static_cast<double>(head_split) / bandwidth(group_size);
  };
  switch (parameters_.cp_comm_type) {
    case config::CpCommType::all_gather:
      seconds.latency = attention * 2.0 * alpha;
      seconds.transfer = attention * 2.0 * (c - 1.0) / c * n * kv / bandwidth(group_size);
      state_passing(group_size, 1);
      break;
    case config::CpCommType::p2p:
      seconds.latency = attention * 2.0 * (c - 1.0) * alpha;
      seconds.transfer = attention * 2.0 * (c - 1.0) / c * n * kv / bandwidth(group_size);
      state_passing(group_size, 1);
      break;
    case config::CpCommType::a2a:
      all_to_all(group_size);
      break;
    case config::CpCommType::a2a_p2p: {
      const std::int64_t inner = parameters_.hierarchical_inner_size > 0
                                     ? std::min(group_size, parameters_.hierarchical_inner_size)
                                     : group_size;
      all_to_all(inner);
      const double ring = static_cast<double>(group_size / inner);
      seconds.latency += attention * 2.0 * (ring - 1.0) * alpha;
      seconds.transfer += attention * 2.0 * (ring - 1.0) * (n / c) *
                          replicas(model_.kv_heads, inner) * kv / bandwidth(group_size);
      state_passing(group_size / inner, inner);
      break;
    }
  }
  return seconds;
}

double CostModel::transfer_seconds(std::int64_t tokens, std::int64_t group_size,
                                   std::int64_t sequences) const {
  return exchange_seconds(tokens, group_size, sequences).transfer;
}

double CostModel::communication_seconds(std::int64_t tokens, std::int64_t group_size,
                                        std::int64_t sequences) const {
  const ExchangeSeconds seconds = exchange_seconds(tokens, group_size, sequences);
  return seconds.latency + seconds.transfer;
}

double CostModel::bin_seconds(std::span<const std::int64_t> lengths,
                              std::int64_t group_size) const {
  double seconds = parameters_.microbatch_overhead_seconds;
  std::int64_t tokens = 0;
  for (const auto length : lengths) {
    seconds += compute_seconds(length, group_size);
    tokens += length;
  }
  return seconds +
         communication_seconds(tokens, group_size, static_cast<std::int64_t>(lengths.size()));
}

CostModel::StepTime CostModel::step_time(const Schedule& schedule,
                                         std::span<const std::int64_t> lengths,
                                         const AlignmentRule& alignment) const {
  std::vector<double> finish(static_cast<std::size_t>(schedule.pool_size), 0.0);
  std::vector<double> busy(static_cast<std::size_t>(schedule.pool_size), 0.0);
  std::vector<double> microbatch_seconds;  // the slowest group of each microbatch
  std::vector<std::int64_t> bin;
  for (std::int64_t m = 0; m < schedule.num_microbatches(); ++m) {
    microbatch_seconds.push_back(0.0);
    for (const auto& group : schedule.groups_of(m)) {
      bin.clear();
      for (const auto id : schedule.ids_of(group))
        bin.push_back(alignment.padded(lengths[static_cast<std::size_t>(id)], group.size));
      const double seconds = bin_seconds(bin, group.size);
      microbatch_seconds.back() = std::max(microbatch_seconds.back(), seconds);
      const auto first = finish.begin() + group.start_rank;
      const double start = *std::max_element(first, first + group.size);
      std::fill(first, first + group.size, start + seconds);
      for (std::int64_t r = group.start_rank; r < group.start_rank + group.size; ++r) {
        busy[static_cast<std::size_t>(r)] += seconds;
      }
    }
  }
  StepTime result;
  result.min_rank_busy_seconds = busy.empty() ? 0.0 : *std::min_element(busy.begin(), busy.end());
  for (std::size_t r = 0; r < finish.size(); ++r) {
    result.step_seconds = std::max(result.step_seconds, finish[r]);
    result.max_rank_busy_seconds = std::max(result.max_rank_busy_seconds, busy[r]);
    result.mean_rank_busy_seconds += busy[r];
  }
  result.mean_rank_busy_seconds /= static_cast<double>(finish.size());
  if (parameters_.pipeline_stages > 1 && !microbatch_seconds.empty())
    apply_pipeline(result, microbatch_seconds);
  return result;
}

// Every stage's pool runs microbatch m on the same groups (the scheduler plans a step once for
// all stages), 1 / pp of its layers: its pass lengths are the microbatch's / (pp v).
void CostModel::apply_pipeline(StepTime& result,
                               const std::vector<double>& microbatch_seconds) const {
  const std::int64_t pp = parameters_.pipeline_stages;
  const std::int64_t v = parameters_.pipeline_virtual_chunks;
  const auto real = static_cast<std::int64_t>(microbatch_seconds.size());
  const std::int64_t scheduled = scheduled_microbatches(pp, v, real);  // empty ones pad
  const double share = 1.0 / static_cast<double>(pp * v);
  const auto pass = [&](std::int64_t m, double fraction) {
    return m < real ? microbatch_seconds[static_cast<std::size_t>(m)] * share * fraction : 0.0;
  };
  const PipelineTiming timing = simulate_pipeline(
      pp, v, scheduled, [&](std::int64_t m, std::int64_t) { return pass(m, 1.0 / 3.0); },
      [&](std::int64_t m, std::int64_t) { return pass(m, 2.0 / 3.0); });
  const double per_stage = 1.0 / static_cast<double>(pp);
  result.step_seconds = timing.step_seconds;
  result.pipeline_bubble_fraction = timing.bubble_fraction;
  result.mean_rank_busy_seconds *= per_stage;
  result.max_rank_busy_seconds *= per_stage;
  result.min_rank_busy_seconds *= per_stage;
}

double CostModel::lower_bound_seconds(std::span<const std::int64_t> lengths, std::int64_t pool_size,
                                      std::int64_t cap, std::int64_t min_group_size,
                                      const AlignmentRule& alignment) const {
  double total_work = 0.0;
  double longest_solo = 0.0;
  std::int64_t tokens = 0;
  for (const auto real_length : lengths) {
    double work = std::numeric_limits<double>::infinity();
    double solo = std::numeric_limits<double>::infinity();
    const std::int64_t needed = group_size_needed(real_length, cap, min_group_size, alignment);
    for (std::int64_t c = needed; c <= pool_size; c *= 2) {
      const std::int64_t length = alignment.padded(real_length, c);
      const double c_d = static_cast<double>(c);
      work = std::min(work, c_d * (compute_seconds(length, c) + transfer_seconds(length, c)));
      solo = std::min(solo, compute_seconds(length, c) + communication_seconds(length, c));
    }
    if (solo == std::numeric_limits<double>::infinity()) {  // only the whole pool can hold it
      const std::int64_t length = alignment.padded(real_length, pool_size);
      work = static_cast<double>(pool_size) *
             (compute_seconds(length, pool_size) + transfer_seconds(length, pool_size));
      solo = compute_seconds(length, pool_size) + communication_seconds(length, pool_size);
    }
    total_work += work;
    longest_solo = std::max(longest_solo, solo);
    tokens += alignment.padded(real_length, std::min(needed, pool_size));  // the least padding
  }
  const std::int64_t min_microbatches =
      std::max<std::int64_t>(1, (tokens + pool_size * cap - 1) / (pool_size * cap));
  return std::max(total_work / static_cast<double>(pool_size), longest_solo) +
         static_cast<double>(min_microbatches) * parameters_.microbatch_overhead_seconds;
}

}  // namespace dyncp::packing

namespace dyncp::packing {

double CostModel::tight_lower_bound_seconds(std::span<const std::int64_t> lengths,
                                            std::int64_t pool_size, std::int64_t cap,
                                            std::int64_t min_group_size,
                                            const AlignmentRule& alignment) const {
  struct Option {
    double solo;
    double work;
    std::size_t sequence;
  };
  std::vector<Option> options;
  std::vector<double> best_work(lengths.size(), std::numeric_limits<double>::infinity());
  double earliest = 0.0;  // every sequence has some group by then
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    double fastest = std::numeric_limits<double>::infinity();
    std::int64_t c = group_size_needed(lengths[i], cap, min_group_size, alignment);
    if (c > pool_size) c = pool_size;
    tokens += alignment.padded(lengths[i], c);  // the least padding any allowed group gives
    for (; c <= pool_size; c *= 2) {
      const std::int64_t length = alignment.padded(lengths[i], c);
      const double solo = compute_seconds(length, c) + communication_seconds(length, c);
      const double work =
          static_cast<double>(c) * (compute_seconds(length, c) + transfer_seconds(length, c));
      options.push_back({solo, work, i});
      fastest = std::min(fastest, solo);
    }
    earliest = std::max(earliest, fastest);
  }
  std::sort(options.begin(), options.end(),
            [](const Option& a, const Option& b) { return a.solo < b.solo; });
  // Sweep T upwards: total = sum of the cheapest work among the groups allowed at T.
  double total = 0.0;
  std::size_t next = 0;
  auto allow_through = [&](double time) {
    for (; next < options.size() && options[next].solo <= time; ++next) {
      const Option& option = options[next];
      double& best = best_work[option.sequence];
      if (option.work < best) {
        total += option.work - (best == std::numeric_limits<double>::infinity() ? 0.0 : best);
        best = option.work;
      }
    }
  };
  allow_through(earliest);
  double bound = earliest;
  const double ranks = static_cast<double>(pool_size);
  while (true) {
    const double needed_time = total / ranks;
    const double next_time =
        next < options.size() ? options[next].solo : std::numeric_limits<double>::infinity();
    if (needed_time <= next_time) {  // the work fits before any cheaper group becomes allowed
      bound = std::max(bound, needed_time);
      break;
    }
    bound = next_time;
    allow_through(next_time);
  }
  const std::int64_t min_microbatches =
      std::max<std::int64_t>(1, (tokens + pool_size * cap - 1) / (pool_size * cap));
  return bound + static_cast<double>(min_microbatches) * parameters_.microbatch_overhead_seconds;
}

}  // namespace dyncp::packing
