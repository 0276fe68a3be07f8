// Reading recipes and overrides: YAML errors with positions, duplicates, types, ranges,
// unknown keys, aliases, Bridge keys with no effect, and HF config.json precedence.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "config/config_loader.hpp"
#include "config_test_helpers.hpp"
#include "core/error.hpp"

using namespace dyncp::config;
using Catch::Contains;
using dyncp::core::Error;

namespace {

ConfigContainer from_text(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return load_config_text(text, overrides, "recipe.yaml");
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    CHECK(error.exit_code() == 2);
    return error.what();
  }
  FAIL("expected a config error");
  return "";
}

}  // namespace

TEST_CASE("a recipe loads typed values into the sections", "[config]") {
  const auto config = test::load();
  CHECK(config.model.seq_length == 256);
  CHECK(config.model.dynamic_context_parallel);
  CHECK(config.model.max_seqlen_per_dp_cp_rank == 128);
  CHECK(config.model.architecture.num_experts == 8);
  CHECK(config.dataset.type == DatasetType::mock_varlen);
  CHECK(config.tokenizer.tokenizer_type == TokenizerType::NullTokenizer);
  CHECK(config.train.global_batch_size == 16);
  CHECK_FALSE(config.model.sequence_packing_scheduler.has_value());
}

TEST_CASE("YAML syntax errors give line and column", "[config]") {
  const auto message = error_of([] { from_text("model:\n  seq_length: 8\n   bad: [1, 2\n"); });
  CHECK_THAT(message, Contains("recipe.yaml:") && Contains("YAML syntax error"));
  CHECK_THAT(message, Contains("recipe.yaml:3:"));
}

TEST_CASE("an empty recipe or one with only comments is rejected", "[config]") {
  CHECK_THAT(error_of([] { from_text(""); }), Contains("recipe is empty"));
  CHECK_THAT(error_of([] { from_text("# only a comment\n"); }), Contains("recipe is empty"));
  CHECK_THAT(error_of([] { from_text("- a\n- b\n"); }), Contains("must be a YAML mapping"));
}

TEST_CASE("an empty section is accepted and keeps the defaults", "[config]") {
  const auto config = from_text("validation:\n# eval_iters: 3\ntrain:\n  train_iters: 4\n");
  CHECK(config.validation.eval_iters == 0);
  CHECK(config.train.train_iters == 4);
}

TEST_CASE("duplicate keys are rejected with their position", "[config]") {
  const auto message = error_of([] { from_text("model:\n  seq_length: 8\n  seq_length: 16\n"); });
  CHECK_THAT(message, Contains("model.seq_length (recipe.yaml:3:3): duplicate key"));
  CHECK_THAT(error_of([] { from_text("train:\n  train_iters: 1\ntrain:\n  train_iters: 2\n"); }),
             Contains("train (recipe.yaml:3:1): duplicate key"));
  // The same key through an alias and through a dotted path.
  CHECK_THAT(error_of([] { from_text("model:\n  num_experts: 8\n  num_moe_experts: 8\n"); }),
             Contains("model.num_experts is already set"));
  CHECK_THAT(error_of([] { from_text("model:\n  seq_length: 8\nmodel.seq_length: 8\n"); }),
             Contains("model.seq_length is already set"));
}

TEST_CASE("a missing or unreadable recipe file is a config error", "[config]") {
  CHECK_THAT(error_of([] { load_config_file("/nonexistent/recipe.yaml", {}); }),
             Contains("/nonexistent/recipe.yaml: cannot read the recipe"));
  CHECK_THAT(
      error_of([] { load_config_file(std::filesystem::temp_directory_path().string(), {}); }),
      Contains("cannot read the recipe"));
}

TEST_CASE("wrong types name the expected type", "[config]") {
  CHECK_THAT(error_of([] { test::load({"train.global_batch_size=abc"}); }),
             Contains("train.global_batch_size") && Contains("abc: expected an integer"));
  CHECK_THAT(error_of([] { test::load({"model.dynamic_context_parallel=yes please"}); }),
             Contains("expected a boolean (true or false)"));
  CHECK_THAT(error_of([] { test::load({"optimizer.lr=fast"}); }),
             Contains("optimizer.lr") && Contains("expected a number"));
  CHECK_THAT(error_of([] { test::load({"model.seq_length=1.5"}); }),
             Contains("model.seq_length") && Contains("expected an integer"));
  CHECK_THAT(error_of([] { test::load({"model.mlp_only_layers=0"}); }),
             Contains("model.mlp_only_layers") && Contains("list of integers"));
  CHECK_THAT(error_of([] { from_text("model:\n  seq_length:\n    a: 1\n"); }),
             Contains("model.seq_length") && Contains("not a mapping"));
  CHECK_THAT(error_of([] { from_text("model: 5\n"); }),
             Contains("model (recipe.yaml:1:1): is a section"));
  CHECK_THAT(error_of([] { test::load({"model.seq_length=null"}); }),
             Contains("model.seq_length") && Contains("must not be null"));
}

TEST_CASE("closed choices reject other values with the list and a suggestion", "[config]") {
  const auto message =
      error_of([] { test::load({"model.sequence_packing_scheduler=dp_balance"}); });
  CHECK_THAT(message,
             Contains("model.sequence_packing_scheduler") &&
                 Contains("expected one of [dp_balanced, default_dynamic_cp, cost_aware]") &&
                 Contains("did you mean dp_balanced?"));
  CHECK_THAT(error_of([] { test::load({"dataset.type=parquet"}); }),
             Contains("dataset.type") && Contains("mock_varlen"));
}

TEST_CASE("zero, negative and overflowing sizes are rejected", "[config]") {
  CHECK_THAT(error_of([] { test::load({"train.global_batch_size=0"}); }),
             Contains("train.global_batch_size") && Contains("must be at least 1"));
  CHECK_THAT(error_of([] { test::load({"model.context_parallel_size=-4"}); }),
             Contains("model.context_parallel_size") && Contains("must be at least 1"));
  CHECK_THAT(error_of([] { test::load({"model.seq_length=99999999999999999999"}); }),
             Contains("model.seq_length") && Contains("overflows a 64-bit integer"));
  CHECK_THAT(error_of([] { test::load({"model.seq_length=4294967296"}); }),
             Contains("model.seq_length") && Contains("must be at most 16777216"));
  CHECK_THAT(error_of([] { test::load({"train.train_iters=4294967296"}); }),
             Contains("train.train_iters") && Contains("must be at most 2147483647"));
  CHECK_THAT(error_of([] { test::load({"optimizer.lr=1e999"}); }),
             Contains("optimizer.lr") && Contains("not a finite number"));
}

TEST_CASE("overrides are typed by the target key, lists included", "[config]") {
  const auto config = test::load({"model.seq_length=512", "model.dynamic_context_parallel=false",
                                  "optimizer.lr=2e-5", "model.mlp_only_layers=[0, 1]",
                                  "model.layer_types=[full_attention, full_attention]",
                                  "dataset.data_path=a:b#c.jsonl", "checkpoint.save=\"dir x\"",
                                  "model.sequence_packing_scheduler=dp_balanced"});
  CHECK(config.model.seq_length == 512);
  CHECK_FALSE(config.model.dynamic_context_parallel);
  CHECK(config.optimizer.lr == Approx(2e-5));
  CHECK(config.model.architecture.mlp_only_layers == std::vector<std::int64_t>{0, 1});
  CHECK(config.model.architecture.layer_types.size() == 2);
  CHECK(config.dataset.data_path == "a:b#c.jsonl");
  CHECK(config.checkpoint.save == "dir x");
  CHECK(config.model.sequence_packing_scheduler == PackingScheduler::dp_balanced);
}

TEST_CASE("an override replaces the recipe's value and later overrides win", "[config]") {
  const auto config = test::load({"train.train_iters=3", "train.train_iters=7"});
  CHECK(config.train.train_iters == 7);
  const auto via_alias = test::load({"model.num_moe_experts=16"});
  CHECK(via_alias.model.architecture.num_experts == 16);
}

TEST_CASE("malformed overrides are rejected", "[config]") {
  CHECK_THAT(error_of([] { test::load({"train.train_iters"}); }),
             Contains("override 'train.train_iters': has no '='"));
  CHECK_THAT(error_of([] { test::load({"=5"}); }), Contains("override '=5': names no key"));
  CHECK_THAT(error_of([] { test::load({"model.mlp_only_layers=[1, 2"}); }),
             Contains("model.mlp_only_layers=[1, 2") && Contains("not valid"));
}

TEST_CASE("unknown keys are errors with a did-you-mean suggestion", "[config]") {
  CHECK_THAT(
      error_of([] { test::load({"model.seq_lenght=8"}); }),
      Contains("model.seq_lenght") && Contains("unknown key; did you mean model.seq_length?"));
  CHECK_THAT(error_of([] { from_text("train:\n  seq_length: 8\n"); }),
             Contains("train.seq_length (recipe.yaml:2:3): unknown key; did you mean"));
  CHECK_THAT(error_of([] { test::load({"model.totally_unrelated_thing=1"}); }),
             Contains("model.totally_unrelated_thing") && Contains("unknown key"));
}

TEST_CASE("every loading problem is reported at once", "[config]") {
  const auto message = error_of([] {
    test::load(
        {"model.seq_lenght=8", "train.global_batch_size=-1", "optimizer.lr=x", "dataset.type=csv"});
  });
  CHECK_THAT(message, Contains("4 problems"));
  CHECK_THAT(message, Contains("model.seq_lenght") && Contains("train.global_batch_size") &&
                          Contains("optimizer.lr") && Contains("dataset.type"));
}

TEST_CASE("Bridge keys with no effect accept only the matching value", "[config]") {
  CHECK_NOTHROW(
      test::load({"model.cuda_graph_impl=none", "model.transformer_impl=transformer_engine",
                  "model.moe_token_dispatcher_type=alltoall", "ddp.grad_reduce_in_fp32=True",
                  "model.virtual_pipeline_model_parallel_size=null"}));
  CHECK_THAT(error_of([] { test::load({"model.cuda_graph_impl=full_iteration"}); }),
             Contains("model.cuda_graph_impl") && Contains("CUDA graphs") && Contains("use none"));
  CHECK_THAT(error_of([] { test::load({"model.moe_token_dispatcher_type=flex"}); }),
             Contains("model.moe_token_dispatcher_type") && Contains("flex token dispatcher"));
  CHECK_THAT(error_of([] { test::load({"ddp.use_megatron_fsdp=true"}); }),
             Contains("Megatron FSDP"));
}

TEST_CASE("HF text_config nesting is accepted in the model section", "[config]") {
  const auto config =
      from_text("model:\n  text_config:\n    hidden_size: 96\n    num_experts: 4\n");
  CHECK(config.model.architecture.hidden_size == 96);
  CHECK(config.model.architecture.num_experts == 4);
}

TEST_CASE("model.hf_model_path fills the architecture and recipe keys override it", "[config]") {
  const auto folder = std::filesystem::temp_directory_path() / "dyncp_config_test_hf";
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "config.json") << R"({"model_type": "qwen3_5_moe", "text_config": {
      "model_type": "qwen3_5_moe_text", "hidden_size": 128, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "num_experts": 16,
      "num_experts_per_tok": 4, "moe_intermediate_size": 24, "full_attention_interval": 2,
      "vocab_size": 1000}})";
  const auto config = from_text("model:\n  hidden_size: 64\n  num_experts: 32\n",
                                {"model.hf_model_path=" + folder.string(), "model.num_experts=8"});
  const auto& arch = config.model.architecture;
  CHECK(arch.model_type == "qwen3_5_moe_text");
  CHECK(arch.hidden_size == 64);  // the recipe's key wins over config.json's 128
  CHECK(arch.num_experts == 8);   // and so does the override
  CHECK(arch.vocab_size == 1000);
  CHECK(arch.num_hidden_layers == 4);
  CHECK(arch.full_attention_interval == 2);  // from config.json: the recipe does not set it
  CHECK(arch.layer_types.size() == 4);

  CHECK_THAT(
      error_of([&] { test::load({"model.hf_model_path=" + (folder / "missing").string()}); }),
      Contains("model.hf_model_path") && Contains("cannot open the model config"));
  std::filesystem::remove_all(folder);
}
