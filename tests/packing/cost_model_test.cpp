#include "packing/cost_model.hpp"

#include <catch2/catch.hpp>

#include "packing/dp_balanced.hpp"

using namespace dyncp::packing;

TEST_CASE("Qwen3-30B-A3B FLOPs per token match Megatron's accounting", "[packing]") {
  const ModelCost cost = model_cost_from_architecture(qwen3_30b_a3b_architecture());
  // reference qwen-moe §6: 18.17 GFLOP per token + 1.18 MFLOP per token per token of length,
  // i.e. 23.0 GFLOP/token at s = 4096.
  CHECK(cost.linear_flops_per_token == Approx(18.17e9).epsilon(0.002));
  CHECK(cost.attention_flops_per_token_squared == Approx(6.0 * 4096 * 48));
  CHECK(cost.attention_layers == 48);
  CHECK(cost.kv_bytes_per_token_per_layer == 2048.0);  // 2 x 4 heads x 128 x 2 bytes
  const double per_token_at_4096 =
      cost.linear_flops_per_token + cost.attention_flops_per_token_squared * 4096;
  CHECK(per_token_at_4096 == Approx(23.0e9).epsilon(0.005));
}

TEST_CASE("the hybrid model counts attention only on its full-attention layers", "[packing]") {
  dyncp::config::ModelArchitecture a;
  a.model_type = "qwen3_5_moe";
  a.num_hidden_layers = 40;
  a.hidden_size = 2048;
  a.num_attention_heads = 16;
  a.num_key_value_heads = 2;
  a.head_dim = 256;
  a.full_attention_interval = 4;
  a.num_experts = 256;
  a.num_experts_per_tok = 8;
  a.moe_intermediate_size = 512;
  a.shared_expert_intermediate_size = 512;
  a.vocab_size = 248320;
  const ModelCost cost = model_cost_from_architecture(a);
  CHECK(cost.attention_layers == 10);
  // reference qwen-moe §6: 17.93 GFLOP/token + 0.246 MFLOP per token of length.
  CHECK(cost.attention_flops_per_token_squared == Approx(0.246e6).epsilon(0.01));
  CHECK(cost.linear_flops_per_token == Approx(17.93e9).epsilon(0.01));
}

TEST_CASE("a sliding window caps the attention pairs a long sequence is charged", "[packing]") {
  dyncp::config::ModelArchitecture a = qwen3_30b_a3b_architecture();
  const CostModel full(model_cost_from_architecture(a), {});
  a.sliding_window = 1024;
  const ModelCost windowed_cost = model_cost_from_architecture(a);
  CHECK(windowed_cost.sliding_window == 1024);
  const CostModel windowed(windowed_cost, {});
  // Up to the window every query sees all its predecessors: nothing changes.
  CHECK(windowed.sequence_flops(512) == full.sequence_flops(512));
  CHECK(windowed.sequence_flops(1024) == full.sequence_flops(1024));
  // Beyond it each further token adds w pairs, so attention grows linearly: 2Lw - w^2.
  const double linear = windowed_cost.linear_flops_per_token;
  const double per_pair_twice = windowed_cost.attention_flops_per_token_squared;
  for (const std::int64_t length : {2048, 8192, 32768}) {
    const double l = static_cast<double>(length);
    CHECK(windowed.sequence_flops(length) ==
          Approx(linear * l + per_pair_twice * (2.0 * l * 1024 - 1024.0 * 1024)));
    CHECK(windowed.sequence_flops(length) < full.sequence_flops(length));
  }
}

TEST_CASE("step time follows group dependencies and the lower bound holds", "[packing]") {
  ModelCost model;
  model.linear_flops_per_token = 1.0;
  model.attention_layers = 1;
  model.kv_bytes_per_token_per_layer = 0.0;
  CostModelParameters parameters;
  parameters.device_flops_per_second = 1.0;  // one second per token per rank
  parameters.collective_latency_seconds = 0.0;
  parameters.microbatch_overhead_seconds = 0.0;
  const CostModel cost(model, parameters);
  // Microbatch 0: rank 0 runs 4 tokens, rank 1 runs 1. Microbatch 1: both run 2 on a group of
  // 2, which starts when rank 0 is free at 4 s: step = 4 + 1 = 5 s.
  Schedule schedule;
  schedule.pool_size = 2;
  schedule.begin_microbatch();
  schedule.add_group(0, 1, std::vector<std::int64_t>{0});
  schedule.add_group(1, 1, std::vector<std::int64_t>{1});
  schedule.end_microbatch();
  schedule.begin_microbatch();
  schedule.add_group(0, 2, std::vector<std::int64_t>{2});
  schedule.end_microbatch();
  const std::vector<std::int64_t> lengths = {4, 1, 2};
  const auto step = cost.step_time(schedule, lengths);
  CHECK(step.step_seconds == Approx(5.0));
  CHECK(step.max_rank_busy_seconds == Approx(5.0));
  CHECK(step.mean_rank_busy_seconds == Approx(3.5));
  // Work bound: 7 token-seconds over 2 ranks = 3.5; the longest alone: 4 on 1 rank or 2 on 2.
  CHECK(cost.lower_bound_seconds(lengths, 2, 4, 1) == Approx(3.5));
  CHECK(cost.lower_bound_seconds(lengths, 2, 4, 1) <= step.step_seconds);
  // Without communication every group is as cheap, so the tight bound is the same here.
  CHECK(cost.tight_lower_bound_seconds(lengths, 2, 4, 1) == Approx(3.5));
}

TEST_CASE("the tight bound charges a long sequence the group it must run on", "[packing]") {
  ModelCost model;
  model.linear_flops_per_token = 1.0;
  model.attention_layers = 1;
  model.kv_bytes_per_token_per_layer = 0.1;
  CostModelParameters parameters;
  parameters.device_flops_per_second = 1.0;  // a second per token per rank
  parameters.link_bytes_per_second = 1.0;
  parameters.collective_latency_seconds = 0.0;
  parameters.microbatch_overhead_seconds = 0.0;
  const CostModel cost(model, parameters);
  // A sequence of 8 tokens and four of 1 token on a pool of 4, cap 8. The long one alone:
  // 1 rank 8 s (work 8), 2 ranks 4 + 2 x 1/2 x 0.8 = 4.8 s (work 9.6), 4 ranks 2 + 2 x 3/4 x
  // 0.8 = 3.2 s (work 12.8). Simple bound: max((8 + 4) / 4, 3.2) = 3.2 s. But a step of
  // T < 4.8 s must run it on 4 ranks: work (12.8 + 4) / 4 = 4.2 s, which is < 4.8: 4.2 s.
  const std::vector<std::int64_t> lengths = {8, 1, 1, 1, 1};
  CHECK(cost.lower_bound_seconds(lengths, 4, 8, 1) == Approx(3.2));
  CHECK(cost.tight_lower_bound_seconds(lengths, 4, 8, 1) == Approx(4.2));
}

TEST_CASE("the recipe's packing section sets the cost model parameters", "[packing]") {
  dyncp::config::PackingCostConfig section;
  section.device_flops_per_second = 1e14;
  section.link_bytes_per_second = 2e11;
  section.collective_latency_seconds = 3e-5;
  section.microbatch_overhead_seconds = 2e-3;
  const CostModelParameters parameters = cost_model_parameters(section);
  CHECK(parameters.device_flops_per_second == 1e14);
  CHECK(parameters.link_bytes_per_second == 2e11);
  CHECK(parameters.collective_latency_seconds == 3e-5);
  CHECK(parameters.microbatch_overhead_seconds == 2e-3);
  // Keys the section does not have keep their defaults; the defaults agree with the config's.
  CHECK(parameters.network_bytes_per_second == CostModelParameters{}.network_bytes_per_second);
  const CostModelParameters defaults = cost_model_parameters({});
  CHECK(defaults.device_flops_per_second == CostModelParameters{}.device_flops_per_second);
  CHECK(defaults.microbatch_overhead_seconds == CostModelParameters{}.microbatch_overhead_seconds);
}

TEST_CASE("each CP exchange has its own latency and bytes terms", "[packing]") {
  const ModelCost model = model_cost_from_architecture(qwen3_30b_a3b_architecture());
  CHECK(model.query_bytes_per_token_per_layer == 8192.0);  // 32 heads x 128 x 2 bytes
  const auto priced = [&](dyncp::config::CpCommType type, std::int64_t inner = 0) {
    CostModelParameters parameters;
    parameters.ranks_per_node = 1 << 20;  // one NVLink domain: bandwidth independent of c
    parameters.cp_comm_type = type;
    parameters.hierarchical_inner_size = inner;
    return CostModel(model, parameters);
  };
  using dyncp::config::CpCommType;
  const CostModel gather = priced(CpCommType::all_gather);
  const CostModel ring = priced(CpCommType::p2p);
  const CostModel a2a = priced(CpCommType::a2a);
  const double alpha = CostModelParameters{}.collective_latency_seconds;
  const double link = CostModelParameters{}.link_bytes_per_second;
  const std::int64_t n = 1 << 17;
  // all_gather: 48 layers x 2 phases; the ring the same bytes in (c - 1) steps per phase.
  CHECK(gather.communication_seconds(0, 8) == Approx(48 * 2 * alpha));
  CHECK(ring.communication_seconds(0, 8) == Approx(48 * 2 * 7 * alpha));
  CHECK(ring.transfer_seconds(n, 8) == Approx(gather.transfer_seconds(n, 8)));
  CHECK(gather.transfer_seconds(n, 8) == Approx(48 * 2 * 7.0 / 8 * n * 2048 / link));
  // a2a: (c-1)/c of N/c rows of Q, out and K/V (replicated 2x at c = 8) each way.
  CHECK(a2a.transfer_seconds(n, 8) ==
        Approx(48 * 2 * 7.0 / 8 * (n / 8.0) * (2 * 8192 + 2 * 2048) / link));
  // Qwen3-30B-A3B: all_gather moves fewer modelled bytes at 8, a2a from 16 on.
  CHECK(a2a.transfer_seconds(n, 8) > gather.transfer_seconds(n, 8));
  CHECK(a2a.transfer_seconds(n, 16) < gather.transfer_seconds(n, 16));
  // a2a+p2p: plain a2a while the group fits the inner size, a ring of K/V beyond.
  CHECK(priced(CpCommType::a2a_p2p, 8).communication_seconds(n, 8) ==
        Approx(a2a.communication_seconds(n, 8)));
  const double hierarchical = priced(CpCommType::a2a_p2p, 8).transfer_seconds(n, 32);
  CHECK(hierarchical ==
        Approx(a2a.transfer_seconds(n, 8) / 4.0 + 48 * 2 * 3 * (n / 32.0) * 2 * 2048 / link));
  CHECK(priced(CpCommType::a2a_p2p, 8).communication_seconds(0, 32) ==
        Approx(48 * 2 * alpha + 48 * 2 * 3 * alpha));
  // One rank moves nothing whatever the exchange.
  CHECK(a2a.communication_seconds(n, 1) == 0.0);
  // A recipe's exchange reaches the parameters.
  dyncp::config::ModelConfig recipe_model;
  recipe_model.cp_comm_type = CpCommType::a2a_p2p;
  recipe_model.hierarchical_context_parallel_sizes = {8, 4};
  const CostModelParameters from_recipe = cost_model_parameters({}, recipe_model);
  CHECK(from_recipe.cp_comm_type == CpCommType::a2a_p2p);
  CHECK(from_recipe.hierarchical_inner_size == 8);
}

TEST_CASE("DeltaNet state passing is charged per sequence under all_gather, p2p and a2a+p2p",
          "[packing]") {
  dyncp::config::ModelArchitecture hybrid = qwen3_30b_a3b_architecture();
  hybrid.model_type = "qwen3_5_moe_text";
  hybrid.num_hidden_layers = 8;  // interval 4: 6 DeltaNet and 2 attention layers
  const ModelCost model = model_cost_from_architecture(hybrid);
  CHECK(model.linear_attention_layers == 6);
  // 32 value heads of 128 x (128 + 128) for [F | P] and 128 x 128 for G, plus three conv tails
  // of 3 rows of raw q, k and v (2 x 16 x 128 + 32 x 128 channels), fp32.
  CHECK(model.linear_state_bytes_per_segment_per_layer ==
        4.0 * (32 * 128 * 256 + 32 * 128 * 128 + 3 * 3 * (2 * 16 * 128 + 32 * 128)));
  const auto priced = [&](dyncp::config::CpCommType type, std::int64_t inner = 0) {
    CostModelParameters parameters;
    parameters.ranks_per_node = 1 << 20;
    parameters.cp_comm_type = type;
    parameters.hierarchical_inner_size = inner;
    return CostModel(model, parameters);
  };
  using dyncp::config::CpCommType;
  const double alpha = CostModelParameters{}.collective_latency_seconds;
  const double link = CostModelParameters{}.link_bytes_per_second;
  const double sigma = model.linear_state_bytes_per_segment_per_layer;
  const std::int64_t n = 1 << 15;
  for (const CpCommType type : {CpCommType::all_gather, CpCommType::p2p}) {
    const CostModel cost = priced(type);
    // Five sequences receive 2 (c - 1) segments' states each per layer, whatever their length.
    CHECK(cost.transfer_seconds(n, 4, 5) - cost.transfer_seconds(n, 4, 0) ==
          Approx(6 * 5 * 2 * 3 * sigma / link));
    CHECK(cost.transfer_seconds(n, 4, 1) - cost.transfer_seconds(n, 4, 0) ==
          Approx(cost.transfer_seconds(2 * n, 4, 1) - cost.transfer_seconds(2 * n, 4, 0)));
    // Four collectives per DeltaNet layer on top of the attention layers' phases.
    const double attention_latency = type == CpCommType::p2p ? 2 * 2 * 3 * alpha : 2 * 2 * alpha;
    CHECK(cost.communication_seconds(0, 4, 0) == Approx(attention_latency + 6 * 4 * alpha));
    CHECK(cost.communication_seconds(n, 1, 5) == 0.0);
  }
  // a2a runs DeltaNet heads over whole sequences: nothing per sequence.
  const CostModel a2a = priced(CpCommType::a2a);
  CHECK(a2a.transfer_seconds(n, 4, 5) == a2a.transfer_seconds(n, 4, 0));
  // a2a+p2p: states on the ring of c / inner ranks, over 1 / inner of the value heads.
  const CostModel hierarchical = priced(CpCommType::a2a_p2p, 2);
  CHECK(hierarchical.transfer_seconds(n, 8, 3) - hierarchical.transfer_seconds(n, 8, 0) ==
        Approx(6 * 3 * 2 * 3 * sigma / 2 / link));
  CHECK(hierarchical.transfer_seconds(n, 2, 3) == hierarchical.transfer_seconds(n, 2, 0));
  // A bin's time counts its sequences.
  const std::int64_t lengths[] = {4096, 4096};
  CHECK(priced(CpCommType::all_gather).bin_seconds(lengths, 4) ==
        Approx(CostModelParameters{}.microbatch_overhead_seconds +
               2 * priced(CpCommType::all_gather).compute_seconds(4096, 4) +
               priced(CpCommType::all_gather).communication_seconds(8192, 4, 2)));
}
