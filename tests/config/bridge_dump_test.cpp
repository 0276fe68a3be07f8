// Megatron-Bridge ConfigContainer dumps (tests/fixtures/bridge/, written from Bridge's published
// Qwen recipes by tools/bridge/make_fixture_dumps.py): the classification table covers every
// Bridge field, the dumps edited for dynamic CP resolve to the same layout and model as the
// equivalent native recipes, the unedited dumps are refused only for genuine features, and
// honoured, inert and refused fields behave as their class says.

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/bridge_fields.hpp"
#include "config/config_loader.hpp"
#include "config/key_table.hpp"
#include "config/resolve.hpp"
#include "core/error.hpp"

using namespace dyncp::config;
namespace fs = std::filesystem;

namespace {

std::string fixture_path(const std::string& name) {
  return std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/bridge/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Edit {
  const char* section;
  const char* key;
  const char* old_value;
  const char* new_value;
};

struct Dump {
  std::string name;
  std::int64_t world_size;
  // The unedited dump is refused for these when it is read...
  std::vector<std::string> refused_keys;
  // ...and, with these edits, for these when it is resolved (the rules of docs/config.md).
  std::vector<Edit> read_edits;
  std::vector<std::string> rule_keys;
};

const std::vector<Dump>& dumps() {
  static const std::vector<Dump> all = {
      {"qwen3_30b_a3b_pretrain",
       16,
       {"tokenizer.use_tokenizer_vocab_size"},
       {{"tokenizer", "use_tokenizer_vocab_size", "true", "false"}},
       {"model.calculate_per_token_loss", "ddp.average_in_collective",
        "dataset.enable_global_batch_packing", "model.max_seqlen_per_dp_cp_rank"}},
      {"qwen3_30b_a3b_sft",
       16,
       {"dataset.enable_offline_packing"},
       {{"dataset", "enable_offline_packing", "true", "false"}},
       {"model.calculate_per_token_loss", "ddp.average_in_collective", "dataset.dataloader_type",
        "dataset.enable_global_batch_packing", "model.max_seqlen_per_dp_cp_rank"}},
      {"qwen3_next_80b_a3b_sft",
       16,
       {"model.moe_router_load_balancing_type", "dataset.enable_offline_packing"},
       {{"dataset", "enable_offline_packing", "true", "false"},
        {"model", "moe_router_load_balancing_type", "global_aux_loss", "aux_loss"}},
       {"model.calculate_per_token_loss", "dataset.dataloader_type",
        "dataset.enable_global_batch_packing", "model.max_seqlen_per_dp_cp_rank"}},
      {"qwen35_35b_a3b_pretrain",
       8,
       {"model.moe_router_load_balancing_type", "tokenizer.use_tokenizer_vocab_size"},
       {{"model", "moe_router_load_balancing_type", "global_aux_loss", "aux_loss"},
        {"tokenizer", "use_tokenizer_vocab_size", "true", "false"}},
       {"model.calculate_per_token_loss", "ddp.average_in_collective",
        "dataset.enable_global_batch_packing", "model.max_seqlen_per_dp_cp_rank"}},
  };
  return all;
}

// tests/fixtures/bridge/hf_cache: a local HF cache holding each checkpoint's config.json, so
// hub names resolve without a network.
bool use_fixture_hub_cache() {
  static const bool set = ::setenv("HF_HUB_CACHE", fixture_path("hf_cache").c_str(), 1) == 0;
  return set;
}

ConfigContainer load_text(const std::string& text, const std::string& name = "dump.yaml") {
  REQUIRE(use_fixture_hub_cache());
  return load_config_text(text, {}, name);
}

std::string error_of(const std::string& text, std::int64_t world_size) {
  try {
    auto config = load_text(text);
    resolve_config(config, world_size);
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    return error.what();
  }
  return "";
}

// The lines of `section:` in the --print-config dump, without the folder-valued keys.
std::string section_of(const ConfigContainer& config, const std::string& section) {
  std::istringstream in(dump_config_yaml(config));
  std::string line, out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ') inside = line == section + ":";
    if (inside && line.find("hf_model_path") == std::string::npos &&
        line.find("tokenizer_model") == std::string::npos) {
      out += line + "\n";
    }
  }
  return out;
}

// Replace `key: old` inside the top-level `section:` of a dump.
std::string edit(std::string text, const std::string& section, const std::string& key,
                 const std::string& old_value, const std::string& new_value) {
  const auto start = text.find("\n" + section + ":\n");
  REQUIRE(start != std::string::npos);
  const std::string needle = "\n  " + key + ": " + old_value + "\n";
  const auto at = text.find(needle, start);
  REQUIRE(at != std::string::npos);
  text.replace(at, needle.size(), "\n  " + key + ": " + new_value + "\n");
  return text;
}

}  // namespace

TEST_CASE("every Bridge field is classified and every rule names a field", "[config][bridge]") {
  REQUIRE(bridge_fields().size() > 800);
  std::vector<std::string> unclassified;
  for (const auto& field : bridge_fields()) {
    if (classify_bridge_field(field.path()) == nullptr) unclassified.push_back(field.path());
  }
  INFO("unclassified: " << unclassified.size()
                        << (unclassified.empty() ? "" : " first " + unclassified.front()));
  CHECK(unclassified.empty());
  for (const auto& rule : bridge_rules()) {
    bool matches = false;
    for (const auto& field : bridge_fields()) {
      if (classify_bridge_field(field.path()) == &rule) matches = true;
    }
    INFO(rule.pattern);
    CHECK(matches);
    if (rule.kind == BridgeFieldClass::honoured) {
      CHECK(!rule.target.empty());
      if (rule.target != "special") CHECK(find_key(rule.target) != nullptr);
    }
  }
}

TEST_CASE("Bridge dumps edited for dynamic CP match the native recipes", "[config][bridge]") {
  for (const auto& dump : dumps()) {
    INFO(dump.name);
    auto bridge = load_text(read_text(fixture_path(dump.name + "_dynamic_cp.yaml")));
    resolve_config(bridge, dump.world_size);
    auto native = load_config_file(fixture_path("native/" + dump.name + ".yaml"), {});
    resolve_config(native, dump.world_size);
    CHECK(describe_layout(bridge) == describe_layout(native));
    CHECK(section_of(bridge, "model") == section_of(native, "model"));
    for (const char* section : {"train", "validation", "optimizer", "scheduler", "ddp", "rng"}) {
      CHECK(section_of(bridge, section) == section_of(native, section));
    }
    CHECK(bridge.mixed_precision == native.mixed_precision);
    CHECK(bridge.dataset.type == native.dataset.type);
    CHECK(bridge.dataset.mock_length_distribution == native.dataset.mock_length_distribution);
    CHECK(bridge.dataset.data_path == native.dataset.data_path);
    CHECK(!bridge.model.hf_model_path.empty());  // the hub name resolved in the local cache
    CHECK(bridge.model.dynamic_context_parallel);
  }
}

TEST_CASE("unedited Bridge dumps are refused only for genuine features", "[config][bridge]") {
  auto check_refusal = [](const std::string& message, const std::vector<std::string>& keys) {
    INFO(message);
    REQUIRE(!message.empty());
    for (const auto& key : keys) CHECK(message.find(key) != std::string::npos);
    const auto count =
        std::to_string(keys.size()) + (keys.size() == 1 ? " problem)" : " problems)");
    CHECK(message.find(count) != std::string::npos);  // nothing else is refused
    CHECK(message.find("unknown key") == std::string::npos);
  };
  for (const auto& dump : dumps()) {
    INFO(dump.name);
    auto text = read_text(fixture_path(dump.name + ".yaml"));
    check_refusal(error_of(text, dump.world_size), dump.refused_keys);
    if (dump.read_edits.empty()) continue;
    for (const auto& change : dump.read_edits) {
      text = edit(text, change.section, change.key, change.old_value, change.new_value);
    }
    check_refusal(error_of(text, dump.world_size), dump.rule_keys);
  }
}

TEST_CASE("inert Bridge settings away from the defaults give one summary warning",
          "[config][bridge]") {
  auto config = load_text(read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml")));
  resolve_config(config, 16);
  int summaries = 0;
  for (const auto& warning : config_warnings(config)) {
    if (warning.find("Megatron-Bridge") != std::string::npos) {
      ++summaries;
      CHECK(warning.find("model.cuda_graph_impl=transformer_engine") != std::string::npos);
      CHECK(warning.find("model.moe_token_dispatcher_type=flex") != std::string::npos);
      CHECK(warning.find("model.seq_length") == std::string::npos);  // honoured, not inert
    }
  }
  CHECK(summaries == 1);
  // The overlap keys are honoured now: neither is in the summary, whatever its value.
  for (const auto& setting : config.bridge_inert_settings) {
    CHECK(setting.find("ddp.overlap_param_gather") == std::string::npos);
    CHECK(setting.find("moe_shared_expert_overlap") == std::string::npos);
  }
  // At Bridge's defaults an inert field adds nothing.
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  const auto count = load_text(text).bridge_inert_settings.size();
  const auto edited = edit(text, "model", "cuda_graph_impl", "transformer_engine", "none");
  CHECK(load_text(edited).bridge_inert_settings.size() == count - 1);
}

TEST_CASE("honoured Bridge fields change what they map to", "[config][bridge]") {
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  const auto base = load_text(text);
  struct Case {
    const char* key;
    const char* old_value;
    const char* new_value;
    std::function<bool(const ConfigContainer&)> changed;
  };
  const std::vector<Case> cases = {
      {"num_layers", "48", "24",
       [](const auto& c) { return c.model.architecture.num_hidden_layers == 24; }},
      {"num_moe_experts", "128", "64",
       [](const auto& c) { return c.model.architecture.num_experts == 64; }},
      {"ffn_hidden_size", "6144", "4096",
       [](const auto& c) { return c.model.architecture.intermediate_size == 4096; }},
      {"moe_ffn_hidden_size", "768", "512",
       [](const auto& c) { return c.model.architecture.moe_intermediate_size == 512; }},
      {"kv_channels", "128", "64",
       [](const auto& c) { return c.model.architecture.head_dim == 64; }},
      {"num_query_groups", "4", "8",
       [](const auto& c) { return c.model.architecture.num_key_value_heads == 8; }},
      {"rotary_base", "1000000", "500000",
       [](const auto& c) { return c.model.architecture.rope_theta == 500000.0; }},
      {"rotary_percent", "1.0", "0.5",
       [](const auto& c) { return c.model.architecture.partial_rotary_factor == 0.5; }},
      {"layernorm_epsilon", "1.0e-06", "1.0e-05",
       [](const auto& c) { return c.model.architecture.rms_norm_eps == 1e-5; }},
      {"moe_router_topk", "8", "4",
       [](const auto& c) { return c.model.architecture.num_experts_per_tok == 4; }},
      {"moe_aux_loss_coeff", "0.001", "0.01",
       [](const auto& c) { return c.model.architecture.router_aux_loss_coef == 0.01; }},
      {"moe_router_pre_softmax", "false", "true",
       [](const auto& c) { return !c.model.architecture.norm_topk_prob; }},
      {"moe_layer_freq", "1", "[0, 1, 1]",
       [](const auto& c) {
         return c.model.architecture.mlp_only_layers == std::vector<std::int64_t>{0};
       }},
      {"seq_length", "4096", "8192", [](const auto& c) { return c.model.seq_length == 8192; }},
      {"context_parallel_size", "2", "4",
       [](const auto& c) { return c.model.context_parallel_size == 4; }},
      {"max_seqlen_per_dp_cp_rank", "1024", "2048",
       [](const auto& c) { return c.model.max_seqlen_per_dp_cp_rank == 2048; }},
      // The recipes set both true (the defaults); false selects the per-expert / unfused path.
      {"moe_grouped_gemm", "true", "false",
       [](const auto& c) { return !c.model.moe_grouped_gemm; }},
      {"moe_permute_fusion", "true", "false",
       [](const auto& c) { return !c.model.moe_permute_fusion; }},
  };
  for (const auto& test_case : cases) {
    INFO(test_case.key);
    CHECK_FALSE(test_case.changed(base));
    const auto config =
        load_text(edit(text, "model", test_case.key, test_case.old_value, test_case.new_value));
    CHECK(test_case.changed(config));
  }
  // ddp.overlap_grad_reduce and ddp.bucket_size are honoured (the fixture sets overlap true).
  CHECK(base.ddp.overlap_grad_reduce);
  CHECK_FALSE(base.ddp.bucket_size.has_value());
  const auto no_overlap = load_text(edit(text, "ddp", "overlap_grad_reduce", "true", "false"));
  CHECK_FALSE(no_overlap.ddp.overlap_grad_reduce);
  // ddp.overlap_param_gather is honoured too (the fixture sets it with the distributed optimizer).
  CHECK(base.ddp.overlap_param_gather);
  const auto no_gather = load_text(edit(text, "ddp", "overlap_param_gather", "true", "false"));
  CHECK_FALSE(no_gather.ddp.overlap_param_gather);
  const auto buckets = load_text(edit(text, "ddp", "bucket_size", "null", "1000000"));
  CHECK(buckets.ddp.bucket_size == std::int64_t{1000000});
  const auto adam = load_text(edit(text, "optimizer", "lr", "0.0003", "0.001"));
  CHECK(adam.optimizer.lr == 0.001);
  const auto seed = load_text(edit(text, "rng", "seed", "1234", "99"));
  CHECK(seed.rng.seed == 99);
  CHECK_FALSE(base.checkpoint.async_save);
  const auto async = load_text(edit(text, "checkpoint", "async_save", "false", "true"));
  CHECK(async.checkpoint.async_save);
  // The logger's TensorBoard folder and W&B settings, as a Bridge launch line sets them.
  CHECK(base.logger.tensorboard_dir == "nemo_experiments/default/tb_logs");
  CHECK(base.logger.wandb_project.empty());
  auto logger = edit(text, "logger", "wandb_project", "null", "dyncp");
  logger = edit(logger, "logger", "wandb_exp_name", "null", "run1");
  logger = edit(logger, "logger", "wandb_entity", "null", "team");
  logger = edit(logger, "logger", "wandb_save_dir", "null", "/tmp/wb");
  logger = edit(logger, "logger", "tensorboard_dir", "nemo_experiments/default/tb_logs", "tb");
  const auto with_wandb = load_text(logger);
  CHECK(with_wandb.logger.wandb_project == "dyncp");
  CHECK(with_wandb.logger.wandb_exp_name == "run1");
  CHECK(with_wandb.logger.wandb_entity == "team");
  CHECK(with_wandb.logger.wandb_save_dir == "/tmp/wb");
  CHECK(with_wandb.logger.tensorboard_dir == "tb");
}

TEST_CASE("the hybrid's Bridge dump honours model.moe_shared_expert_overlap", "[config][bridge]") {
  const auto text = read_text(fixture_path("qwen35_35b_a3b_pretrain_dynamic_cp.yaml"));
  CHECK_FALSE(load_text(text).model.moe_shared_expert_overlap);
  const auto overlapped =
      load_text(edit(text, "model", "moe_shared_expert_overlap", "false", "true"));
  CHECK(overlapped.model.moe_shared_expert_overlap);
  for (const auto& setting : overlapped.bridge_inert_settings)
    CHECK(setting.find("moe_shared_expert_overlap") == std::string::npos);
}

TEST_CASE("a Bridge dump with tensor parallelism loads its TP sizes", "[config][bridge]") {
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  auto with_tp = edit(text, "model", "tensor_model_parallel_size", "1", "2");
  with_tp = edit(with_tp, "model", "expert_tensor_parallel_size", "1", "2");
  auto config = load_text(with_tp);
  CHECK(config.model.tensor_model_parallel_size == 2);
  CHECK(config.model.expert_tensor_parallel_size == std::optional<std::int64_t>(2));
  // EP 16 with each expert split over 2 ranks needs etp x ep = 32 ranks.
  CHECK_THAT(error_of(with_tp, 16), Catch::Contains("model.expert_model_parallel_size: 16"));
  resolve_config(config, 32);
  CHECK(config.layout.tensor_model_parallel_size == 2);
  CHECK(config.layout.pool_size == 16);
  CHECK(config.layout.expert_tensor_parallel_size == 2);
  // The dump's own ETP 1 is kept: whole experts per EP rank under TP 2.
  auto whole_experts = load_text(edit(text, "model", "tensor_model_parallel_size", "1", "2"));
  resolve_config(whole_experts, 16);
  CHECK(whole_experts.layout.pool_size == 8);
  CHECK(whole_experts.layout.expert_tensor_parallel_size == 1);
}

TEST_CASE("refused Bridge values, unknown keys and classes name what is supported",
          "[config][bridge]") {
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  auto message = error_of(edit(text, "model", "softmax_type", "vanilla", "learnable"), 16);
  CHECK(message.find("model.softmax_type") != std::string::npos);
  CHECK(message.find("off-by-one or learnable softmax is not built; supported: vanilla") !=
        std::string::npos);

  // Every problem at once: fp8, MTP and MLA together.
  auto several = edit(text, "model", "fp8", "null", "hybrid");
  several = edit(several, "model", "mtp_num_layers", "null", "1");
  several = edit(several, "model", "multi_latent_attention", "false", "true");
  message = error_of(several, 16);
  CHECK(message.find("3 problems") != std::string::npos);
  CHECK(message.find("model.fp8") != std::string::npos);
  CHECK(message.find("model.mtp_num_layers") != std::string::npos);
  CHECK(message.find("multi-latent attention (MLA)") != std::string::npos);

  message = error_of(edit(text, "optimizer", "optimizer", "adam", "muon"), 16);
  CHECK(message.find("optimizer.optimizer") != std::string::npos);

  message = error_of(edit(text, "model", "num_layers", "48", "48\n  num_layer: 4"), 16);
  CHECK(message.find("model.num_layer") != std::string::npos);
  CHECK(message.find("did you mean model.num_layers?") != std::string::npos);

  auto provider = text;
  provider.replace(provider.find("megatron.bridge.models.gpt_provider.GPTModelProvider"),
                   std::string("megatron.bridge.models.gpt_provider.GPTModelProvider").size(),
                   "megatron.bridge.models.llama.llama_provider.Llama3ModelProvider");
  message = error_of(provider, 16);
  CHECK(message.find("Llama3ModelProvider") != std::string::npos);
  CHECK(message.find("model provider is not built") != std::string::npos);

  auto dataset = text;
  dataset.replace(dataset.find("megatron.bridge.training.config.GPTDatasetConfig"),
                  std::string("megatron.bridge.training.config.GPTDatasetConfig").size(),
                  "megatron.bridge.data.builders.energon.EnergonDatasetConfig");
  message = error_of(dataset, 16);
  CHECK(message.find("EnergonDatasetConfig") != std::string::npos);

  message =
      error_of(edit(text, "model", "hf_model_id", "Qwen/Qwen3-30B-A3B", "Qwen/Absent-1B"), 16);
  CHECK(message.find("Qwen/Absent-1B is not in the local Hugging Face cache") != std::string::npos);
  CHECK(message.find("models--Qwen--Absent-1B") != std::string::npos);
}

TEST_CASE("hub names resolve to the pinned snapshot and agree with the checkpoint",
          "[config][bridge]") {
  // The SFT recipe pins the tokenizer revision through hf_tokenizer_kwargs.
  const auto sft = load_text(read_text(fixture_path("qwen3_30b_a3b_sft_dynamic_cp.yaml")));
  CHECK(sft.tokenizer.tokenizer_model ==
        fixture_path("hf_cache/models--Qwen--Qwen3-30B-A3B/snapshots/"
                     "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"));
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  const auto message = error_of(edit(text, "model", "hf_model_revision", "null", "deadbeef00"), 16);
  CHECK(message.find("models--Qwen--Qwen3-30B-A3B/snapshots/deadbeef00") != std::string::npos);
  // A hybrid layer pattern on a Qwen3-MoE checkpoint is a contradiction, not a guess.
  const auto contradiction = error_of(
      edit(text, "model", "experimental_attention_variant", "null", "gated_delta_net"), 16);
  CHECK(contradiction.find("contradicts the checkpoint's model_type qwen3_moe") !=
        std::string::npos);
}

TEST_CASE("dtype and enum objects are read as their values", "[config][bridge]") {
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  const std::string float32 = "exp_avg_dtype:\n    _call_: false\n    _target_: torch.float32";
  auto edited = text;
  const auto at = edited.find(float32);
  REQUIRE(at != std::string::npos);
  edited.replace(at, float32.size(),
                 "exp_avg_dtype:\n    _call_: false\n    _target_: torch.bfloat16");
  const auto config = load_text(edited);
  CHECK(config.optimizer.exp_avg_dtype == StateDType::bfloat16);
  CHECK(load_text(text).optimizer.exp_avg_dtype == StateDType::float32);
}

TEST_CASE("the Bridge-format print round-trips through the Bridge reader", "[config][bridge]") {
  for (const auto& dump : dumps()) {
    INFO(dump.name);
    for (const auto& source : {fixture_path(dump.name + "_dynamic_cp.yaml"),
                               fixture_path("native/" + dump.name + ".yaml")}) {
      INFO(source);
      auto config = load_text(read_text(source), source);
      resolve_config(config, dump.world_size);
      const auto native = dump_config_yaml(config);
      // The native dump of a Bridge-loaded configuration loads back unchanged.
      auto native_again = load_text(native);
      resolve_config(native_again, dump.world_size);
      CHECK(dump_config_yaml(native_again) == native);

      const auto bridge = dump_bridge_yaml(config);
      CHECK(bridge.find("_target_: megatron.bridge.training.config.ConfigContainer") !=
            std::string::npos);
      auto reloaded = load_text(bridge, "bridge.yaml");
      resolve_config(reloaded, dump.world_size);
      // Every key Bridge expresses comes back; the rest are named in the header comment.
      std::istringstream original(native), again(dump_config_yaml(reloaded));
      std::string expected, actual, section;
      while (std::getline(original, expected) && std::getline(again, actual)) {
        if (!expected.empty() && expected[0] != ' ')
          section = expected.substr(0, expected.size() - 1);
        if (expected == actual) continue;
        const auto key = expected.substr(2, expected.find(':') - 2);
        INFO(section << "." << key << ": " << expected << " vs " << actual);
        CHECK(bridge.find("#   " + section + "." + key + ":") != std::string::npos);
      }
    }
  }
}

TEST_CASE("a Bridge-format dump holds only fields of the classes it names", "[config][bridge]") {
  auto config = load_config_file(fixture_path("native/qwen3_next_80b_a3b_sft.yaml"), {});
  resolve_config(config, 16);
  std::istringstream in(dump_bridge_yaml(config));
  std::string line, section, class_name;
  std::set<std::string> seen;
  int fields = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ') {
      section = line.substr(0, line.find(':'));
      class_name.clear();
      continue;
    }
    if (line.rfind("    ", 0) == 0 || line.rfind("  - ", 0) == 0) continue;  // nested object
    const auto key = line.substr(2, line.find(':') - 2);
    if (key == "_target_") {
      class_name = line.substr(line.rfind('.') + 1);
      continue;
    }
    const auto* field = find_bridge_field(section + "." + key, class_name);
    INFO(section << "." << key << " of " << class_name);
    REQUIRE(field != nullptr);
    CHECK(field->class_name == class_name);
    seen.insert(section + "." + key);
    ++fields;
  }
  CHECK(fields > 700);
  // Bridge's required constructor arguments are all there.
  for (const auto& field : bridge_fields()) {
    if (field.default_value != "<required>") continue;
    if (field.class_name != "GPTSFTDatasetConfig" && field.section == "dataset") continue;
    if (field.section != "dataset" && field.section != "train" && field.section != "model")
      continue;
    INFO(field.path());
    CHECK(seen.count(field.path()) == 1);
  }
}

TEST_CASE("a checkpoint config's RoPE scaling is read, or refused when not implemented",
          "[config][bridge]") {
  const fs::path folder = fs::temp_directory_path() / "dyncp-rope-scaling-test";
  fs::create_directories(folder);
  const auto arch =
      load_config_file(fixture_path("native/qwen3_30b_a3b_pretrain.yaml"), {}).model.architecture;
  const auto with_scaling = [&](const std::string& scaling) {
    auto config_json = to_hf_config_json(arch);
    const auto at = config_json.find("\"rope_theta\"");
    REQUIRE(at != std::string::npos);
    config_json.insert(at, "\"rope_scaling\": " + scaling + ", ");
    std::ofstream(folder / "config.json") << config_json;
  };
  with_scaling(R"({"rope_type": "longrope", "factor": 4.0})");
  CHECK_THROWS_WITH(load_hf_model_config(folder.string()),
                    Catch::Contains("rope_type 'longrope' is not implemented"));
  with_scaling(R"({"rope_type": "yarn", "factor": 4.0})");
  const auto yarn = load_hf_model_config(folder.string());
  CHECK(yarn.rope_scaling.rope_type == "yarn");
  CHECK(yarn.rope_theta == arch.rope_theta);
  // Without it the same file loads with default RoPE.
  std::ofstream(folder / "config.json") << to_hf_config_json(arch);
  CHECK(load_hf_model_config(folder.string()).rope_scaling.rope_type == "default");
  fs::remove_all(folder);
}

TEST_CASE("a pretrained_checkpoint folder without HF weights is refused", "[config][bridge]") {
  // What a Bridge user's pretrained_checkpoint usually is: a Megatron torch_dist folder.
  const fs::path folder = fs::temp_directory_path() / "dyncp-torch-dist-checkpoint-test";
  fs::create_directories(folder / "iter_0000100");
  std::ofstream(folder / "latest_checkpointed_iteration.txt") << "100";
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  auto edited = text;
  const std::string needle = "\n  pretrained_checkpoint: null\n";
  const auto at = edited.find(needle);
  REQUIRE(at != std::string::npos);
  edited.replace(at, needle.size(), "\n  pretrained_checkpoint: " + folder.string() + "\n");
  const auto message = error_of(edited, 16);
  CHECK(message.find("checkpoint.pretrained_checkpoint") != std::string::npos);
  CHECK(message.find("not an HF checkpoint with weights") != std::string::npos);
  fs::remove_all(folder);
}

TEST_CASE("a Qwen3-235B-A22B-shaped Bridge dump with PP 8 is refused for FP4 only",
          "[config][bridge]") {
  auto text = read_text(fixture_path("qwen3_235b_a22b_pretrain_pp8.yaml"));
  const std::string message = error_of(text, 64);
  INFO(message);
  CHECK_THAT(message, Catch::Contains("2 problems") && Catch::Contains("model.fp4") &&
                          Catch::Contains("mixed_precision.fp4") &&
                          Catch::Contains("FP4 training is not built"));
  text = edit(text, "model", "fp4", "e2m1", "null");
  text = edit(text, "mixed_precision", "fp4", "e2m1", "null");
  auto config = load_text(text);
  REQUIRE_NOTHROW(resolve_config(config, 64));
  CHECK(config.layout.pipeline_model_parallel_size == 8);
  CHECK(config.layout.data_parallel_size == 8);
  CHECK(config.layout.expert_model_parallel_size == 8);
  CHECK(config.model.account_for_embedding_in_pipeline_split);
  CHECK(config.model.account_for_loss_in_pipeline_split);
  CHECK(config.model.moe_router_force_load_balancing);
  CHECK(config.model.architecture.num_hidden_layers == 94);
  // 94 layers + embedding + loss = 96 slots over 8 stages.
  CHECK_THAT(describe_layout(config), Catch::Contains("stage 0: 11 layers [0, 11) + embedding") &&
                                          Catch::Contains("stage 1: 12 layers [11, 23)") &&
                                          Catch::Contains("stage 7: 11 layers [83, 94)"));
  // Nothing it sets is unbuilt: it trains at its world size (its overlapped reduction is inert
  // under its distributed optimizer, as at pp 1).
  CHECK(unbuilt_features(config).empty());
  // The world must hold the 8 stages.
  CHECK_THAT(error_of(text, 60), Catch::Contains("model.pipeline_model_parallel_size: 8: must "
                                                 "divide the world size 60"));
}
