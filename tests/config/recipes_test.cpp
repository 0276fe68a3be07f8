// The shipped recipes validate, and every resolved configuration round-trips through the
// --print-config YAML: fed back, it loads and resolves to exactly the same configuration.

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "config/config_loader.hpp"
#include "config/config_reference.hpp"
#include "config/resolve.hpp"
#include "config_test_helpers.hpp"

using namespace dyncp::config;

namespace {

std::string recipe(const std::string& relative) {
  return std::string(DYNCP_SOURCE_DIR) + "/configs/" + relative;
}

ConfigContainer resolve_file(const std::string& relative, std::int64_t world_size,
                             const std::vector<std::string>& overrides = {}) {
  auto config = load_config_file(recipe(relative), overrides);
  resolve_config(config, world_size);
  return config;
}

void check_round_trip(const ConfigContainer& resolved, std::int64_t world_size) {
  const auto dumped = dump_config_yaml(resolved);
  auto reloaded = load_config_text(dumped, {}, "dumped.yaml");
  CHECK(dump_config_yaml(reloaded) == dumped);  // loading is exact
  resolve_config(reloaded, world_size);
  CHECK(dump_config_yaml(reloaded) == dumped);  // resolving a resolved config changes nothing
  CHECK(reloaded.layout.alignment_multiple == resolved.layout.alignment_multiple);
  CHECK(reloaded.layout.dynamic_group_sizes == resolved.layout.dynamic_group_sizes);
}

}  // namespace

TEST_CASE("the Qwen3.5-35B-A3B reference recipe validates on 8 ranks", "[config]") {
  const auto config = resolve_file("qwen3_5_35b_a3b_dynamic_cp.yaml", 8);
  CHECK(config.layout.data_parallel_size == 2);
  CHECK(config.layout.context_parallel_size == 4);
  CHECK(config.layout.pool_size == 8);
  CHECK(config.layout.expert_model_parallel_size == 8);
  CHECK(config.layout.expert_data_parallel_size == 1);
  CHECK(config.layout.alignment_multiple == 16);
  CHECK(config.layout.dynamic_group_sizes == std::vector<std::int64_t>{1, 2, 4, 8});
  CHECK(config.model.sequence_packing_scheduler == PackingScheduler::default_dynamic_cp);
  CHECK(config.model.seq_length == 32768);
  CHECK(config.model.max_seqlen_per_dp_cp_rank == 8192);
  CHECK(config.train.global_batch_size == 64);
  CHECK(config.model.architecture.layer_types.size() == 40);
  check_round_trip(config, 8);
}

TEST_CASE("the reference recipe's static-CP baseline is two overrides away", "[config]") {
  const auto config = resolve_file(
      "qwen3_5_35b_a3b_dynamic_cp.yaml", 8,
      {"model.dynamic_context_parallel=false", "model.sequence_packing_scheduler=dp_balanced"});
  CHECK(config.model.sequence_packing_scheduler == PackingScheduler::dp_balanced);
  CHECK(config.layout.alignment_multiple == 8);  // 2 x cp
  CHECK(config.layout.dynamic_group_sizes == std::vector<std::int64_t>{4});
  check_round_trip(config, 8);
  // Turning dynamic CP off alone leaves nothing contradictory either: the scheduler is derived.
  CHECK_NOTHROW(
      resolve_file("qwen3_5_35b_a3b_dynamic_cp.yaml", 8, {"model.dynamic_context_parallel=false"}));
}

TEST_CASE("the other recipes validate and round-trip", "[config]") {
  check_round_trip(resolve_file("qwen3_30b_a3b.yaml", 8), 8);
  const auto demo = resolve_file("demo/tiny_moe.yaml", 4);
  CHECK(demo.layout.pool_size == 4);
  CHECK(demo.layout.expert_model_parallel_size == 2);
  CHECK(demo.model.architecture.vocab_size == 512);
  CHECK(demo.dataset.type == DatasetType::chat_jsonl);
  check_round_trip(demo, 4);
  for (const std::int64_t world : {2, 4, 8}) {
    INFO("world " << world);
    const auto smoke = resolve_file("smoke/tiny_mock.yaml", world);
    CHECK(smoke.dataset.type == DatasetType::mock_varlen);
    check_round_trip(smoke, world);
  }
}

TEST_CASE("a config with every optional key set round-trips", "[config]") {
  const auto config = test::resolved(
      {"model.recompute_granularity=selective", "model.recompute_modules=[moe_act, layernorm]",
       "checkpoint.save=out dir/\"quoted\"", "logger.metrics_path=m.jsonl",
       "validation.eval_interval=5", "scheduler.lr_warmup_iters=2", "model.mlp_only_layers=[0]",
       "optimizer.lr=3.3e-7", "packing.link_bytes_per_second=123456789.125"});
  check_round_trip(config, 4);
}

TEST_CASE("docs/config.md ends with the generated key reference", "[config]") {
  std::ifstream in(std::string(DYNCP_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const auto content = text.str();
  const auto marker = content.find(config_reference_marker);
  REQUIRE(marker != std::string::npos);
  // Regenerate: keep docs/config.md up to the marker line, then append
  // `dyncp-train --print-config-reference`.
  CHECK(content.substr(marker) == generate_config_reference());
}
