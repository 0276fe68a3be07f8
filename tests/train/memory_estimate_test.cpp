// The per-rank memory estimate: parameter count, monotonicity, and agreement with what the
// model's arenas actually reach on one bin.

#include "train/memory_estimate.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <tuple>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"
#include "model/qwen3_moe_model.hpp"

using namespace dyncp;

namespace {

config::ConfigContainer smoke_config(std::int64_t world_size,
                                     const std::vector<std::string>& overrides = {},
                                     const std::string& recipe = "tiny_mock.yaml") {
  auto config = config::load_config_file(std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/" + recipe,
                                         overrides);
  config::resolve_config(config, world_size);
  return config;
}

double line_bytes(const train::MemoryEstimate& estimate, const std::string& name) {
  for (const auto& line : estimate.lines)
    if (line.name == name) return line.bytes;
  FAIL("no memory line named " << name);
  return 0;
}

bool has_line(const train::MemoryEstimate& estimate, const std::string& name) {
  for (const auto& line : estimate.lines)
    if (line.name == name) return true;
  return false;
}

// The activation arenas' high-water mark after one step of two sequences filling a 256-token
// bin on one rank.
double full_bin_high_water(const config::ModelArchitecture& architecture,
                           const model::ModelOptions& options) {
  model::Qwen3MoeModel model(architecture, options);
  model.parameters().init_random(7);
  model::TokenSequences sequences(2);
  for (std::int32_t i = 0; i < 128; ++i) {
    sequences[0].push_back((i * 37 + 5) % 512);
    sequences[1].push_back((i * 91 + 11) % 512);
  }
  const auto packed = model::pack_sequences(sequences);
  model::LocalSeams seams;
  model::BinOptions bin_options;
  bin_options.loss_grad_scale = 1.0 / 254.0;
  model.run_bin(packed.bin, seams.seams(), bin_options);
  return static_cast<double>(model.activation_high_water_bytes());
}

}  // namespace

TEST_CASE("memory estimate: parameter count matches the model's layout", "[train][memory]") {
  auto architecture = smoke_config(4).model.architecture;
  architecture.resolve();
  for (const bool tied : {false, true}) {
    for (const bool dense_first : {false, true}) {
      INFO("tied " << tied << ", dense first layer " << dense_first);
      config::ModelArchitecture a = architecture;
      a.tie_word_embeddings = tied;
      a.intermediate_size = 40;
      if (dense_first) a.mlp_only_layers = {0};
      const model::Qwen3MoeParameters parameters(a);
      CHECK(train::count_parameters(a) == parameters.num_parameters());
    }
  }
}

TEST_CASE("memory estimate: parameter count of the hybrid family matches the model's layout",
          "[train][memory]") {
  // Gated DeltaNet and gated attention layers, shared experts; with EP a slice of the experts.
  auto architecture = smoke_config(4, {}, "tiny_hybrid_mock.yaml").model.architecture;
  architecture.resolve();
  REQUIRE(architecture.is_hybrid());
  for (const std::int64_t ep : {1, 2, 4}) {
    INFO("ep " << ep);
    const std::int64_t held = architecture.num_experts / ep;
    const model::Qwen3MoeParameters parameters(architecture, {0, held});
    CHECK(train::count_parameters(architecture, ep) == parameters.num_parameters());
    CHECK(train::count_expert_parameters(architecture, ep) == parameters.expert_values().numel());
  }
}

TEST_CASE("memory estimate: grows with tokens per rank, shrinks with recompute",
          "[train][memory]") {
  const auto small = smoke_config(4, {"model.max_seqlen_per_dp_cp_rank=128"});
  REQUIRE(small.model.context_parallel_size == 2);
  const auto large = smoke_config(4, {"model.max_seqlen_per_dp_cp_rank=512"});
  const auto recompute =
      smoke_config(4, {"model.max_seqlen_per_dp_cp_rank=512", "model.recompute_granularity=full"});
  const auto small_estimate = train::estimate_memory(train::memory_estimate_input(small));
  const auto large_estimate = train::estimate_memory(train::memory_estimate_input(large));
  const auto recompute_estimate = train::estimate_memory(train::memory_estimate_input(recompute));

  CHECK(large_estimate.per_bin_bytes > small_estimate.per_bin_bytes);
  CHECK(large_estimate.total_bytes() > small_estimate.total_bytes());
  CHECK(line_bytes(large_estimate, "saved activations") ==
        Approx(4 * line_bytes(small_estimate, "saved activations")));
  CHECK(large_estimate.parameter_state_bytes == small_estimate.parameter_state_bytes);

  CHECK(recompute_estimate.per_bin_bytes < large_estimate.per_bin_bytes);
  CHECK(line_bytes(recompute_estimate, "saved activations") <
        line_bytes(large_estimate, "saved activations"));
  CHECK(recompute_estimate.parameter_state_bytes == large_estimate.parameter_state_bytes);
  // Block recompute of the first layer of four: between none and every layer (with two layers
  // it saves nothing: the recomputed layer's activations and the kept one's coexist).
  const auto saved = [](std::vector<std::string> overrides) {
    overrides.push_back("model.num_hidden_layers=4");
    return line_bytes(
        train::estimate_memory(train::memory_estimate_input(smoke_config(4, overrides))),
        "saved activations");
  };
  const double kept = saved({});
  const double every = saved({"model.recompute_granularity=full"});
  const double first = saved({"model.recompute_granularity=full", "model.recompute_method=block",
                              "model.recompute_num_layers=1"});
  CHECK(every < first);
  CHECK(first < kept);

  // Weights, gradients and two moments: 16 bytes per parameter.
  CHECK(large_estimate.parameter_state_bytes ==
        Approx(16.0 * static_cast<double>(large_estimate.num_parameters)));
  // The smoke layout has cp 2 inside a dynamic pool of 4 and EP 2: at 128 tokens per rank the
  // 256-token samples need groups of 2, so both buffers are counted; at 512 every sample fits
  // one rank and no group gathers.
  CHECK(line_bytes(small_estimate, "CP all-gather") > 0);
  CHECK(line_bytes(large_estimate, "CP all-gather") == 0);
  CHECK(line_bytes(large_estimate, "EP dispatch") > 0);
  const auto single = smoke_config(
      1, {"model.context_parallel_size=1", "model.expert_model_parallel_size=1",
          "model.dynamic_context_parallel=false", "model.max_seqlen_per_dp_cp_rank=256"});
  const auto single_estimate = train::estimate_memory(train::memory_estimate_input(single));
  CHECK(line_bytes(single_estimate, "CP all-gather") == 0);
  CHECK(line_bytes(single_estimate, "EP dispatch") == 0);
}

TEST_CASE("memory estimate: dynamic CP gathers for the largest group a step forms, not the pool",
          "[train][memory]") {
  // tiny_mock: 128 tokens per rank, seq_length 256, dynamic CP over the dp x cp pool.
  const auto group = [](std::int64_t world, std::vector<std::string> overrides) {
    return train::memory_estimate_input(smoke_config(world, overrides)).largest_cp_group;
  };
  CHECK(group(4, {}) == 2);  // 256 tokens need 2 ranks of 128; the pool is 4
  CHECK(group(8, {}) == 2);  // the pool is 8: still 2
  CHECK(group(8, {"model.seq_length=512"}) == 4);
  CHECK(group(8, {"model.seq_length=4096", "model.max_seqlen_per_dp_cp_rank=1024"}) == 4);
  const std::string short_samples =
      "dataset.mock_length_distribution=lognormal(min=16,max=128,mean=64,sigma=0.8)";
  CHECK(group(4, {"model.seq_length=128", short_samples}) == 1);  // every sample fits one rank
  CHECK(group(4, {"model.seq_length=128", short_samples,
                  "model.min_dynamic_context_parallel_size=2"}) == 2);
  // cost_aware may promote sequences and lift bins up to the whole pool.
  CHECK(group(8, {"model.sequence_packing_scheduler=cost_aware"}) == 8);
  // Static CP: the configured size.
  CHECK(group(8, {"model.dynamic_context_parallel=false", "model.context_parallel_size=4",
                  "model.sequence_packing_scheduler=dp_balanced"}) == 4);

  // The all-gather line: 5 buffers of c x T K/V rows for that group.
  auto architecture = smoke_config(8).model.architecture;
  architecture.resolve();
  const double kv_width =
      static_cast<double>(architecture.num_key_value_heads * architecture.head_dim);
  const auto estimate = train::estimate_memory(train::memory_estimate_input(smoke_config(8)));
  CHECK(line_bytes(estimate, "CP all-gather") == Approx(5.0 * 2 * 128 * kv_width * 4));
}

TEST_CASE("memory estimate: bf16_mixed keeps fp32 state and adds the largest product's copies",
          "[train][memory]") {
  const auto estimate = [](std::vector<std::string> overrides) {
    overrides.push_back("model.max_seqlen_per_dp_cp_rank=256");
    return train::estimate_memory(train::memory_estimate_input(smoke_config(4, overrides)));
  };
  const auto fp32 = estimate({});
  const auto cpu = estimate({"mixed_precision=bf16_mixed"});
  const auto gpu = estimate({"mixed_precision=bf16_mixed", "dist.device=cuda"});
  // fp32 master weights, fp32 main_grad and fp32 moments: the same 16 bytes per parameter.
  CHECK(cpu.parameter_state_bytes == fp32.parameter_state_bytes);
  CHECK(gpu.parameter_state_bytes == fp32.parameter_state_bytes);
  CHECK_FALSE(has_line(fp32, "bf16 operand copies"));
  const double cpu_copies = line_bytes(cpu, "bf16 operand copies");
  CHECK(cpu_copies > 0);
  // The GPU converts to real bf16 (2 bytes), the CPU keeps rounded fp32 copies (4 bytes).
  CHECK(line_bytes(gpu, "bf16 operand copies") == Approx(cpu_copies / 2));
  CHECK(cpu.per_bin_bytes == Approx(fp32.per_bin_bytes + cpu_copies));
  // On the GPU bf16_mixed also stores activations in bf16; with fp32 storage the copies are
  // all it adds.
  auto gpu_input = train::memory_estimate_input(smoke_config(
      4,
      {"model.max_seqlen_per_dp_cp_rank=256", "mixed_precision=bf16_mixed", "dist.device=cuda"}));
  CHECK(gpu_input.bf16_activations);
  gpu_input.bf16_activations = false;
  const auto gpu_fp32_storage = train::estimate_memory(gpu_input);
  CHECK(gpu_fp32_storage.per_bin_bytes == Approx(fp32.per_bin_bytes + cpu_copies / 2));
  CHECK(gpu.per_bin_bytes < gpu_fp32_storage.per_bin_bytes);
  // Fewer experts per rank under EP 4: smaller expert copies, never larger.
  CHECK(line_bytes(estimate({"mixed_precision=bf16_mixed", "model.expert_model_parallel_size=4"}),
                   "bf16 operand copies") <= cpu_copies);
}

TEST_CASE("memory estimate: the GPU's DeltaNet backward scratch is counted on the GPU only",
          "[train][memory]") {
  const auto config = [](const std::string& device) {
    return smoke_config(4, {"dist.device=" + device, "model.max_seqlen_per_dp_cp_rank=256"},
                        "tiny_hybrid_mock.yaml");
  };
  const auto cpu = train::estimate_memory(train::memory_estimate_input(config("cpu")));
  const auto gpu = train::estimate_memory(train::memory_estimate_input(config("cuda")));
  CHECK_FALSE(has_line(cpu, "DeltaNet backward (GPU)"));
  // kernels/gated_delta_rule_chunked_backward.cu (C = 64, T / C chunks): per token and value
  // head 1 + dk + C prepared floats, dk dv per chunk and value head (state gradients),
  // min(chunks x value heads, 256) slots of C (4 dv + 5 dk), dq and dk rows per value head.
  auto a = config("cuda").model.architecture;
  a.resolve();
  const double tokens = 256, heads = static_cast<double>(a.linear_num_value_heads);
  const double dk = static_cast<double>(a.linear_key_head_dim);
  const double dv = static_cast<double>(a.linear_value_head_dim);
  const double chunks = tokens / 64, blocks = std::min(chunks * heads, 256.0);
  const double expected = 4 * (tokens * heads * (1 + dk + 64) + chunks * heads * dk * dv +
                               blocks * 64 * (4 * dv + 5 * dk) + 2 * tokens * heads * dk);
  CHECK(line_bytes(gpu, "DeltaNet backward (GPU)") == Approx(expected));
  CHECK(gpu.per_bin_bytes >= cpu.per_bin_bytes + expected);
}

TEST_CASE("memory estimate: the ring's CP buffers do not grow with the group", "[train][memory]") {
  // Static CP 2 and 4 on 8 ranks: all_gather holds 5 c local K/V-sized buffers, the ring 10.
  const auto estimate = [](std::int64_t cp, const char* exchange) {
    return train::estimate_memory(train::memory_estimate_input(smoke_config(
        8, {"model.context_parallel_size=" + std::to_string(cp),
            "model.dynamic_context_parallel=false", "model.sequence_packing_scheduler=dp_balanced",
            std::string("model.cp_comm_type=") + exchange})));
  };
  const double gather2 = line_bytes(estimate(2, "all_gather"), "CP all-gather");
  const double gather4 = line_bytes(estimate(4, "all_gather"), "CP all-gather");
  const double ring2 = line_bytes(estimate(2, "p2p"), "CP ring");
  const double ring4 = line_bytes(estimate(4, "p2p"), "CP ring");
  CHECK(gather4 == Approx(2 * gather2));
  CHECK(ring2 == Approx(gather2));  // 10 buffers both ways at c = 2
  CHECK(ring4 == Approx(ring2));
}

TEST_CASE("memory estimate: the distributed optimizer divides the moments over the pool",
          "[train][memory]") {
  const auto replicated = train::estimate_memory(train::memory_estimate_input(smoke_config(4)));
  const auto sharded = train::estimate_memory(
      train::memory_estimate_input(smoke_config(4, {"ddp.use_distributed_optimizer=true"})));
  const double full = line_bytes(replicated, "AdamW moments");
  const double pieces = line_bytes(sharded, "AdamW moments");
  // The smoke layout has EP 2 on a pool of 4: this rank holds half the experts; dense state is
  // split over the 4 pool ranks, its experts' over the 2 expert-DP ranks, each count rounded
  // up to a whole element per shard.
  auto architecture = smoke_config(4).model.architecture;
  architecture.resolve();
  const double held_experts = static_cast<double>(train::count_expert_parameters(architecture, 2));
  const double dense = static_cast<double>(train::count_parameters(architecture, 2)) - held_experts;
  CHECK(full == Approx(2 * 4 * (dense + held_experts)));
  CHECK(pieces >= 2 * 4 * (dense / 4 + held_experts / 2));
  CHECK(pieces <= 2 * 4 * (dense / 4 + held_experts / 2 + 2));
  CHECK(replicated.parameter_state_bytes - sharded.parameter_state_bytes == Approx(full - pieces));
  CHECK(sharded.per_bin_bytes == replicated.per_bin_bytes);
  // One rank: nothing to divide, every expert held.
  const auto single = train::estimate_memory(train::memory_estimate_input(smoke_config(
      1, {"model.context_parallel_size=1", "model.expert_model_parallel_size=1",
          "model.dynamic_context_parallel=false", "model.max_seqlen_per_dp_cp_rank=256",
          "ddp.use_distributed_optimizer=true"})));
  CHECK(line_bytes(single, "AdamW moments") ==
        Approx(2 * 4 * static_cast<double>(train::count_parameters(architecture))));
  // The expert share is what the model's expert tensors hold.
  const model::Qwen3MoeParameters parameters(architecture);
  std::int64_t expert_values = 0;
  for (const auto& tensor : parameters.hf_tensors())
    if (tensor.is_expert) expert_values += tensor.value.numel();
  CHECK(train::count_expert_parameters(architecture) == expert_values);
}

TEST_CASE("memory estimate: bf16 optimizer moments take 2 bytes per element each",
          "[train][memory]") {
  const std::vector<std::string> bf16 = {"optimizer.use_precision_aware_optimizer=true",
                                         "optimizer.exp_avg_dtype=bfloat16",
                                         "optimizer.exp_avg_sq_dtype=bfloat16"};
  for (const bool distributed : {false, true}) {
    INFO("distributed optimizer " << distributed);
    std::vector<std::string> base = {std::string("ddp.use_distributed_optimizer=") +
                                     (distributed ? "true" : "false")};
    const auto fp32 = train::estimate_memory(train::memory_estimate_input(smoke_config(4, base)));
    auto one = base;
    one.insert(one.end(), {bf16[0], bf16[2]});  // only exp_avg_sq in bf16
    const auto mixed = train::estimate_memory(train::memory_estimate_input(smoke_config(4, one)));
    base.insert(base.end(), bf16.begin(), bf16.end());
    const auto both = train::estimate_memory(train::memory_estimate_input(smoke_config(4, base)));
    const double moments = line_bytes(fp32, "AdamW moments");
    CHECK(line_bytes(both, "AdamW moments") == Approx(moments / 2));
    CHECK(line_bytes(mixed, "AdamW moments") == Approx(moments * 3 / 4));
    CHECK(fp32.parameter_state_bytes - both.parameter_state_bytes == Approx(moments / 2));
    CHECK(both.per_bin_bytes == fp32.per_bin_bytes);
  }
}

TEST_CASE("memory estimate: EP divides the expert weights, gradients and moments",
          "[train][memory]") {
  auto architecture = smoke_config(4).model.architecture;
  architecture.resolve();
  const std::int64_t every_expert = train::count_expert_parameters(architecture);
  const std::int64_t dense = train::count_parameters(architecture) - every_expert;
  for (const std::int64_t ep : {1, 2, 4}) {
    INFO("ep " << ep);
    // What the model allocates for one EP rank's slice.
    const std::int64_t count = architecture.num_experts / ep;
    const model::Qwen3MoeParameters slice(architecture, {architecture.num_experts - count, count});
    CHECK(train::count_parameters(architecture, ep) == slice.num_parameters());
    CHECK(train::count_expert_parameters(architecture, ep) * ep == every_expert);
    const auto estimate = train::estimate_memory(train::memory_estimate_input(
        smoke_config(4, {"model.context_parallel_size=1", "model.dynamic_context_parallel=false",
                         "model.max_seqlen_per_dp_cp_rank=256",
                         "model.expert_model_parallel_size=" + std::to_string(ep)})));
    CHECK(estimate.num_parameters == dense + every_expert / ep);
    CHECK(estimate.parameter_state_bytes ==
          Approx(16.0 * static_cast<double>(dense + every_expert / ep)));
  }
}

TEST_CASE("memory estimate: close to the arenas' high-water mark on a full bin",
          "[train][memory]") {
  for (const char* recipe : {"tiny_mock.yaml", "tiny_hybrid_mock.yaml"})
    for (const bool recompute : {false, true})
      for (const bool bf16 : {false, true}) {
        INFO(recipe << ", recompute " << recompute << ", bf16_mixed " << bf16);
        auto input = train::memory_estimate_input(smoke_config(
            1,
            {"model.context_parallel_size=1", "model.expert_model_parallel_size=1",
             "model.dynamic_context_parallel=false", "model.max_seqlen_per_dp_cp_rank=256",
             std::string("mixed_precision=") + (bf16 ? "bf16_mixed" : "fp32")},
            recipe));
        input.recompute_full = recompute;
        const auto estimate = train::estimate_memory(input);

        model::ModelOptions options;
        options.recompute_full = recompute;
        if (bf16) options.precision = ops::ComputePrecision::bf16;
        const double measured = full_bin_high_water(input.architecture, options);
        INFO("measured " << measured << " bytes, estimated " << estimate.per_bin_bytes);
        // A slight over-estimate: it adds peaks the arenas may reach at different times.
        CHECK(estimate.per_bin_bytes >= measured);
        CHECK(estimate.per_bin_bytes < 1.4 * measured);
      }
}

TEST_CASE("memory estimate: bf16 activations lower the estimate and the arenas' high-water mark",
          "[train][memory]") {
  // One 256-token bin on one rank under bf16 products, fp32 against bf16 activation storage
  // (ModelOptions::bf16_activations; the GPU's default, which the CPU model runs the same way):
  // both the estimate and the measured high-water mark fall, and the estimate still covers the
  // measurement closely. The layer-inputs line is exactly L/2 + 2 rows of [T, h].
  for (const char* recipe : {"tiny_mock.yaml", "tiny_hybrid_mock.yaml"})
    for (const bool recompute : {false, true}) {
      INFO(recipe << ", recompute " << recompute);
      auto input = train::memory_estimate_input(
          smoke_config(1,
                       {"model.context_parallel_size=1", "model.expert_model_parallel_size=1",
                        "model.dynamic_context_parallel=false",
                        "model.max_seqlen_per_dp_cp_rank=256", "mixed_precision=bf16_mixed"},
                       recipe));
      CHECK_FALSE(input.bf16_activations);  // the CPU path keeps fp32 activations
      input.recompute_full = recompute;
      const auto fp32_estimate = train::estimate_memory(input);
      input.bf16_activations = true;
      const auto bf16_estimate = train::estimate_memory(input);
      model::ModelOptions options;
      options.recompute_full = recompute;
      options.precision = ops::ComputePrecision::bf16;
      options.bf16_activations = false;
      const double fp32_measured = full_bin_high_water(input.architecture, options);
      options.bf16_activations = true;
      const double bf16_measured = full_bin_high_water(input.architecture, options);
      INFO("measured " << fp32_measured << " -> " << bf16_measured << " bytes, estimated "
                       << fp32_estimate.per_bin_bytes << " -> " << bf16_estimate.per_bin_bytes);
      CHECK(bf16_measured < fp32_measured);
      CHECK(bf16_estimate.per_bin_bytes < fp32_estimate.per_bin_bytes);
      CHECK(bf16_estimate.per_bin_bytes >= bf16_measured);
      CHECK(bf16_estimate.per_bin_bytes < 1.4 * bf16_measured);
      const auto& a = input.architecture;
      CHECK(line_bytes(bf16_estimate, "layer inputs + final norm") ==
            Approx((static_cast<double>(a.num_hidden_layers) / 2 + 2) *
                   static_cast<double>(a.hidden_size) * 256 * 4));
    }
}

TEST_CASE("memory estimate: the seed recipe's activations fall under bf16 activations",
          "[train][memory]") {
  // configs/qwen3_5_35b_a3b_dynamic_cp.yaml on 8 ranks, dist.device=cuda mixed_precision=
  // bf16_mixed (the dry run's input): bf16 activations are on, and the per-bin bytes fall by
  // what they store in bf16: the layer inputs (40 x [T, h] in bf16, one widened), and of the one
  // recomputed layer y_perm and the EP-received rows (half) and the unkept x_perm under EP 8
  // (k x h per token each), the experts' gate_up and SwiGLU output (half of 3 k x I), and the
  // Gated DeltaNet's z, rule output and gated-norm output (half of 3 x Hv·dv). The saving
  // reaches the 25% target.
  auto config = config::load_config_file(
      std::string(DYNCP_SOURCE_DIR) + "/configs/qwen3_5_35b_a3b_dynamic_cp.yaml",
      {"dist.device=cuda", "mixed_precision=bf16_mixed"});
  config::resolve_config(config, 8);
  auto input = train::memory_estimate_input(config);
  CHECK(input.bf16_activations);
  const auto bf16 = train::estimate_memory(input);
  input.bf16_activations = false;
  const auto fp32 = train::estimate_memory(input);
  const auto& a = input.architecture;
  const double row = static_cast<double>(a.hidden_size) * 8192 * 4;  // one fp32 [T, h]
  const double k = static_cast<double>(a.num_experts_per_tok);
  const double layers = static_cast<double>(a.num_hidden_layers);
  const double value = static_cast<double>(a.linear_num_value_heads * a.linear_value_head_dim);
  CHECK(fp32.per_bin_bytes - bf16.per_bin_bytes ==
        Approx((layers + 4 - (layers / 2 + 2)) * row +
               (2 * k +
                1.5 * k * static_cast<double>(a.moe_intermediate_size) /
                    static_cast<double>(a.hidden_size) +
                1.5 * value / static_cast<double>(a.hidden_size)) *
                   row));
  INFO("activations and buffers " << fp32.per_bin_bytes / 1048576.0 << " -> "
                                  << bf16.per_bin_bytes / 1048576.0 << " MiB");
  // 25% below fp32 storage, and below 0.75 x 11,105 MiB (the figure before bf16 activations).
  CHECK(bf16.per_bin_bytes <= 0.75 * fp32.per_bin_bytes);
  CHECK(bf16.per_bin_bytes <= 0.75 * 11105.0 * 1048576.0);
}

TEST_CASE("memory estimate: selective recomputation saves what the estimate says",
          "[train][memory]") {
  // One 256-token bin on one rank: the arenas' high-water mark with and without moe_act /
  // layernorm, against the estimate's per-bin change (saved activations down, one layer's
  // recomputed tensors up in the backward scratch). Expected kept bytes per layer and token:
  // moe_act k x I (+ the shared expert's I_s), layernorm 2 x h.
  for (const char* recipe : {"tiny_mock.yaml", "tiny_hybrid_mock.yaml"}) {
    config::ModelArchitecture kept_estimate_architecture;  // resolved, every layer MoE
    const auto run = [&](const std::string& modules) {
      std::vector<std::string> overrides = {
          "model.context_parallel_size=1", "model.expert_model_parallel_size=1",
          "model.dynamic_context_parallel=false", "model.max_seqlen_per_dp_cp_rank=256"};
      if (!modules.empty()) {
        overrides.push_back("model.recompute_granularity=selective");
        overrides.push_back("model.recompute_modules=[" + modules + "]");
      }
      const auto input = train::memory_estimate_input(smoke_config(1, overrides, recipe));
      model::ModelOptions options;
      options.selective = input.selective;
      const double high_water = full_bin_high_water(input.architecture, options);
      if (modules.empty()) kept_estimate_architecture = input.architecture;
      return std::pair{high_water, train::estimate_memory(input)};
    };
    const auto [kept, kept_estimate] = run("");
    for (const std::string modules : {"core_attn", "moe_act", "layernorm", "moe_act, layernorm"}) {
      INFO(recipe << ", recompute_modules [" << modules << "]");
      const auto [measured, estimate] = run(modules);
      const double saving = kept - measured;
      const double estimated_saving = kept_estimate.per_bin_bytes - estimate.per_bin_bytes;
      INFO("measured saving " << saving << " bytes, estimated " << estimated_saving);
      if (modules == "core_attn") {
        CHECK(saving == 0);
        CHECK(estimated_saving == 0);
        continue;
      }
      // The kept tensors go (the saved-activations line drops by exactly their bytes); the
      // estimate also adds one layer's recomputed tensors to the backward-scratch peak, which
      // at these tiny sizes the arenas partly absorb below another phase's peak. So the
      // measured saving lies between the estimate's net change and the kept bytes dropped.
      const double dropped = line_bytes(kept_estimate, "saved activations") -
                             line_bytes(estimate, "saved activations");
      const auto& a = kept_estimate_architecture;
      double per_layer_token = 0;
      if (modules.find("moe_act") != std::string::npos)
        per_layer_token +=
            static_cast<double>(a.num_experts_per_tok * a.moe_intermediate_size +
                                (a.is_hybrid() ? a.shared_expert_intermediate_size : 0));
      if (modules.find("layernorm") != std::string::npos)
        per_layer_token += 2.0 * static_cast<double>(a.hidden_size);
      CHECK(dropped ==
            Approx(per_layer_token * static_cast<double>(a.num_hidden_layers) * 256 * 4));
      CHECK(estimated_saving > 0);
      CHECK(saving >= estimated_saving);
      CHECK(saving <= dropped);
      CHECK(estimate.per_bin_bytes >= measured);
    }
  }
}

TEST_CASE("memory estimate: recomputing whole MLPs (mlp, shared_experts) saves what it says",
          "[train][memory]") {
  // mlp on the MoE smoke model with a dense first layer, shared_experts on the hybrid (a
  // shared expert in every layer): the MLP keeps only its input, so gate_up and the SwiGLU
  // output (3 x I per token) go from each such layer.
  struct Case {
    const char* recipe;
    std::vector<std::string> extra;
    const char* module;
  };
  for (const Case& c : {Case{"tiny_mock.yaml", {"model.mlp_only_layers=[0]"}, "mlp"},
                        Case{"tiny_hybrid_mock.yaml", {}, "shared_experts"}}) {
    INFO(c.recipe << ", recompute_modules [" << c.module << "]");
    const auto run = [&](bool recompute) {
      std::vector<std::string> overrides = {
          "model.context_parallel_size=1", "model.expert_model_parallel_size=1",
          "model.dynamic_context_parallel=false", "model.max_seqlen_per_dp_cp_rank=256"};
      overrides.insert(overrides.end(), c.extra.begin(), c.extra.end());
      if (recompute) {
        overrides.push_back("model.recompute_granularity=selective");
        overrides.push_back(std::string("model.recompute_modules=[") + c.module + "]");
      }
      const auto input = train::memory_estimate_input(smoke_config(1, overrides, c.recipe));
      model::ModelOptions options;
      options.selective = input.selective;
      return std::tuple{full_bin_high_water(input.architecture, options),
                        train::estimate_memory(input), input.architecture};
    };
    const auto [kept, kept_estimate, a] = run(false);
    const auto [measured, estimate, unused] = run(true);
    const double dropped =
        line_bytes(kept_estimate, "saved activations") - line_bytes(estimate, "saved activations");
    const bool dense = std::string(c.module) == "mlp";
    const double layers = dense ? 1.0 : static_cast<double>(a.num_hidden_layers);
    const double intermediate =
        static_cast<double>(dense ? a.intermediate_size : a.shared_expert_intermediate_size);
    CHECK(dropped == Approx(3 * intermediate * layers * 256 * 4));
    const double saving = kept - measured;
    const double estimated_saving = kept_estimate.per_bin_bytes - estimate.per_bin_bytes;
    INFO("measured saving " << saving << " bytes, estimated " << estimated_saving);
    CHECK(saving > 0);
    CHECK(saving <= dropped);
    CHECK(saving >= estimated_saving);
    CHECK(estimate.per_bin_bytes >= measured);
  }
}

TEST_CASE("memory estimate: the fit verdict compares every rank's total with what is available",
          "[train][memory]") {
  const auto estimate = train::estimate_memory(train::memory_estimate_input(smoke_config(4)));
  const double total = estimate.total_bytes();
  CHECK(train::memory_fit_line(estimate, 4, 4 * total + 1, "host").rfind("  fits:", 0) == 0);
  CHECK(train::memory_fit_line(estimate, 4, 4 * total - 1, "host").rfind("  does NOT fit:", 0) ==
        0);
  CHECK(train::memory_fit_line(estimate, 1, 0, "GPU memory").find("not checked") !=
        std::string::npos);
  CHECK(train::host_memory_bytes() > 0);
}

TEST_CASE("memory estimate: TP divides heads, FFN columns, vocabulary and their weights",
          "[train][memory][tp]") {
  // The same dp 2 x cp 2 pool at tp 1 (4 ranks) and tp 2 (8 ranks).
  const auto estimate = [](std::int64_t world, std::vector<std::string> overrides) {
    return train::estimate_memory(train::memory_estimate_input(smoke_config(world, overrides)));
  };
  const auto one = estimate(4, {});
  const auto whole_experts =
      estimate(8, {"model.tensor_model_parallel_size=2", "model.expert_tensor_parallel_size=1"});
  const auto split_experts = estimate(8, {"model.tensor_model_parallel_size=2"});
  const auto sequence_parallel =
      estimate(8, {"model.tensor_model_parallel_size=2", "model.sequence_parallel=true"});

  auto architecture = smoke_config(4).model.architecture;
  architecture.resolve();
  const std::int64_t experts = train::count_expert_parameters(architecture, 2);
  const std::int64_t dense = train::count_parameters(architecture, 2) - experts;
  const std::int64_t replicated = train::count_tensor_parallel_replicated_parameters(architecture);
  REQUIRE(replicated > 0);
  REQUIRE(replicated < dense);
  CHECK(one.num_parameters == dense + experts);
  CHECK(whole_experts.num_parameters == (dense - replicated + 1) / 2 + replicated + experts);
  CHECK(split_experts.num_parameters ==
        (dense - replicated + 1) / 2 + replicated + (experts + 1) / 2);
  CHECK(line_bytes(whole_experts, "weights") ==
        Approx(4.0 * static_cast<double>(whole_experts.num_parameters)));
  // K/V are split by heads: the all-gather's buffers halve.
  CHECK(line_bytes(whole_experts, "CP all-gather") == Approx(line_bytes(one, "CP all-gather") / 2));
  CHECK(line_bytes(whole_experts, "saved activations") < line_bytes(one, "saved activations"));
  // The residual stream is replicated over TP, and sharded along the sequence under SP.
  CHECK(line_bytes(whole_experts, "layer inputs + final norm") ==
        Approx(line_bytes(one, "layer inputs + final norm")));
  CHECK(line_bytes(sequence_parallel, "layer inputs + final norm") ==
        Approx(line_bytes(one, "layer inputs + final norm") / 2));
  CHECK(line_bytes(sequence_parallel, "saved activations") <
        line_bytes(split_experts, "saved activations"));

  // The hybrid on the GPU: the gated delta rule's backward scratch follows the value heads.
  const auto hybrid = [](std::int64_t world, std::vector<std::string> overrides) {
    overrides.push_back("dist.device=cuda");
    auto config = config::load_config_file(
        std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_hybrid_mock.yaml", overrides);
    config::resolve_config(config, world);
    return train::estimate_memory(train::memory_estimate_input(config));
  };
  const double one_rank = line_bytes(hybrid(4, {}), "DeltaNet backward (GPU)");
  REQUIRE(one_rank > 0);
  CHECK(line_bytes(hybrid(8, {"model.tensor_model_parallel_size=2"}), "DeltaNet backward (GPU)") <
        one_rank);
}

TEST_CASE("memory estimate: pipeline stages split the parameters and keep pp - s microbatches",
          "[train][memory]") {
  // 4 layers over 2 stages (pp 2, static CP on 2 ranks a stage).
  const std::vector<std::string> piped = {
      "model.pipeline_model_parallel_size=2", "model.num_hidden_layers=4",
      "model.dynamic_context_parallel=false", "model.sequence_packing_scheduler=dp_balanced",
      "model.max_seqlen_per_dp_cp_rank=256",  "model.context_parallel_size=1"};
  const auto config = smoke_config(4, piped);
  const auto whole_config =
      smoke_config(2, {"model.num_hidden_layers=4", "model.dynamic_context_parallel=false",
                       "model.sequence_packing_scheduler=dp_balanced",
                       "model.max_seqlen_per_dp_cp_rank=256", "model.context_parallel_size=1"});
  const auto whole = train::estimate_memory(train::memory_estimate_input(whole_config));
  const auto first_input = train::memory_estimate_input_for_stage(config, 0);
  const auto last_input = train::memory_estimate_input_for_stage(config, 1);
  const auto first = train::estimate_memory(first_input);
  const auto last = train::estimate_memory(last_input);
  // The stages' parameters are the model's (less the alignment gaps the stage count skips).
  const std::int64_t sum = first.num_parameters + last.num_parameters;
  CHECK(sum <= whole.num_parameters);
  CHECK(sum >= whole.num_parameters - 16 * 64);
  // Layers [0, 2) + embedding, [2, 4) + final norm and LM head.
  REQUIRE(first_input.stage_layers.size() == 1);
  CHECK(first_input.stage_layers.front() == std::pair<std::int64_t, std::int64_t>{0, 2});
  CHECK(last_input.stage_layers.front() == std::pair<std::int64_t, std::int64_t>{2, 2});
  // 1F1B: stage 0 keeps 2 microbatches in flight, stage 1 one; the loss chunk is on stage 1.
  CHECK(first_input.pipeline_in_flight == 2.0);
  CHECK(last_input.pipeline_in_flight == 1.0);
  const auto line = [](const train::MemoryEstimate& estimate, const std::string& name) {
    for (const auto& item : estimate.lines)
      if (item.name == name) return item.bytes;
    FAIL("no line " << name);
    return 0.0;
  };
  CHECK(line(first, "saved activations") == Approx(2 * line(last, "saved activations")));
  CHECK(line(first, "cross-entropy chunk") == 0.0);
  CHECK(line(last, "cross-entropy chunk") == line(whole, "cross-entropy chunk"));
  CHECK(line(first, "pipeline P2P buffers") > 0.0);
  // Bounded by the step's microbatches.
  CHECK(train::memory_estimate_input_for_stage(config, 0, 1).pipeline_in_flight == 1.0);
  // Interleaved (vpp 2, 8 layers): stage 0 holds chunks [0, 2) and [4, 6), and keeps
  // 2 (pp - 1) + (v - 1) pp + 1 = 5 chunks of 2 layers in flight: 2.5 stages' worth.
  auto interleaved_overrides = piped;
  interleaved_overrides[1] = "model.num_hidden_layers=8";
  interleaved_overrides.push_back("model.virtual_pipeline_model_parallel_size=2");
  const auto interleaved =
      train::memory_estimate_input_for_stage(smoke_config(4, interleaved_overrides), 0);
  CHECK(interleaved.stage_layers ==
        std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 2}, {4, 2}});
  CHECK(interleaved.pipeline_in_flight == 2.5);
}

TEST_CASE("memory estimate: a pipeline stage under TP holds 1/tp of its dense tensors",
          "[train][memory][tp]") {
  // pp 2 with cp 1: 4 ranks at tp 1 (dp 2 a stage), 8 ranks at tp 2 (the same dp 2 pool).
  const std::vector<std::string> piped = {
      "model.pipeline_model_parallel_size=2", "model.num_hidden_layers=4",
      "model.dynamic_context_parallel=false", "model.sequence_packing_scheduler=dp_balanced",
      "model.max_seqlen_per_dp_cp_rank=256",  "model.context_parallel_size=1"};
  std::vector<std::string> tensor = piped;
  tensor.push_back("model.tensor_model_parallel_size=2");
  const auto one = smoke_config(4, piped);
  const auto two = smoke_config(8, tensor);
  REQUIRE(two.layout.pool_size == one.layout.pool_size);
  for (const std::int64_t stage : {0, 1}) {
    const auto input = train::memory_estimate_input_for_stage(two, stage);
    CHECK(input.tensor_model_parallel_size == 2);
    const auto whole = train::estimate_memory(train::memory_estimate_input_for_stage(one, stage));
    const auto split = train::estimate_memory(input);
    INFO("stage " << stage);
    // Dense and expert tensors halve (etp = tp), the replicated norms and routers do not.
    CHECK(split.num_parameters < whole.num_parameters);
    CHECK(split.num_parameters > whole.num_parameters / 2);
    CHECK(split.num_parameters <=
          (whole.num_parameters + 1) / 2 + train::count_tensor_parallel_replicated_parameters([&] {
            auto a = one.model.architecture;
            a.resolve();
            return a;
          }()));
  }
}
