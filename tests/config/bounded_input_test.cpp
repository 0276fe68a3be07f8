// Recipes and model configs an attacker (or a broken pipeline) could hand the loader: each is
// refused with a config or data error (exit 2) naming the file and line, quickly and without
// growing memory, instead of being expanded, silently truncated, or hanging.

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/config_loader.hpp"
#include "config/model_architecture.hpp"
#include "config_test_helpers.hpp"
#include "core/error.hpp"

using namespace dyncp;
namespace fs = std::filesystem;

namespace {

// The error a recipe text gets (empty when it loads).
std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    auto config = config::load_config_text(text, overrides, "bad.yaml");
    config::resolve_config(config, 4);
  } catch (const core::Error& error) {
    CHECK(error.exit_code() == 2);
    return error.what();
  }
  return "";
}

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("dyncp_bounded_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("a YAML alias bomb is refused before it expands", "[config][bounded]") {
  // 9 levels of 9 aliases: 9^9 = 387 million values once expanded (452 bytes of text).
  std::string bomb = "model:\n  mlp_only_layers: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (int level = 1; level <= 9; ++level) {
    bomb += "x" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 9; ++i) bomb += (i ? ", *l" : "*l") + std::to_string(level - 1);
    bomb += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string error = load_error(config::test::valid_recipe + bomb);
  CHECK_THAT(error, Catch::Contains("bad.yaml:") && Catch::Contains("more than 100000 values"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("a second YAML document is refused, naming its line", "[config][bounded]") {
  const std::string error =
      load_error(config::test::valid_recipe + "---\ntrain:\n  train_iters: 5\n");
  CHECK_THAT(error, Catch::Contains("second YAML document") && Catch::Contains("bad.yaml:26"));
  // A lone document start marker, or a trailing empty document, is still one recipe.
  CHECK(load_error("---\n" + config::test::valid_recipe + "---\n").empty());
}

TEST_CASE("YAML tags are refused, not dropped", "[config][bounded]") {
  CHECK_THAT(load_error(config::test::valid_recipe, {"train.train_iters=[!custom 5]"}),
             Catch::Contains("YAML tag '!custom'"));
  std::string tagged = config::test::valid_recipe;
  tagged.replace(tagged.find("train_iters: 10"), 15, "train_iters: !custom 10");
  CHECK_THAT(load_error(tagged),
             Catch::Contains("YAML tag '!custom'") && Catch::Contains("bad.yaml:"));
  tagged = config::test::valid_recipe;
  tagged.replace(tagged.find("train_iters: 10"), 15, "train_iters: !!str 10");
  CHECK_THAT(load_error(tagged), Catch::Contains("YAML tag"));
}

TEST_CASE("deep nesting, NUL bytes and huge keys in a recipe are refused", "[config][bounded]") {
  std::string deep = config::test::valid_recipe + "validation:\n";
  for (int i = 0; i < 100; ++i)
    deep += std::string(2 * (i + 1), ' ') + "k" + std::to_string(i) + ":\n";
  deep += std::string(202, ' ') + "v: 1\n";
  CHECK_THAT(load_error(deep), Catch::Contains("nested deeper than 64"));
  CHECK_THAT(load_error(config::test::valid_recipe + std::string(1, '\0') + "junk\n"),
             Catch::Contains("NUL byte") && Catch::Contains("bad.yaml:"));
  CHECK_THAT(load_error(config::test::valid_recipe + std::string(300, 'k') + ": 1\n"),
             Catch::Contains("key of 300 characters"));
}

TEST_CASE("a recipe path that is a FIFO or a device is refused without reading it",
          "[config][bounded]") {
  const fs::path dir = scratch("fifo_recipe");
  const fs::path fifo = dir / "recipe.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE_THROWS_WITH(config::load_config_file(fifo.string(), {}),
                      Catch::Contains("recipe.yaml") && Catch::Contains("a FIFO"));
  REQUIRE_THROWS_WITH(config::load_config_file("/dev/zero", {}),
                      Catch::Contains("/dev/zero") && Catch::Contains("a device"));
  fs::remove_all(dir);
}

TEST_CASE("sizes no machine can hold are refused before anything is derived from them",
          "[config][bounded]") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(load_error(config::test::valid_recipe, {"model.num_hidden_layers=1000000"}),
             Catch::Contains("model.num_hidden_layers: 1000000: exceeds 1024"));
  CHECK_THAT(load_error(config::test::valid_recipe,
                        {"model.num_experts=4096", "model.moe_intermediate_size=1048576",
                         "model.hidden_size=65536", "model.num_hidden_layers=1024"}),
             Catch::Contains("more than 1 PiB"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));

  // The same through an HF config.json, where the recipe's key bounds do not apply.
  const fs::path dir = scratch("hf_sizes");
  std::ofstream(dir / "config.json")
      << R"({"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 64,
             "num_hidden_layers": 4611686018427387904, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
             "num_experts_per_tok": 2, "moe_intermediate_size": 32})";
  const std::string recipe =
      "model:\n  hf_model_path: " + dir.string() + "\n" +
      config::test::valid_recipe.substr(config::test::valid_recipe.find("  context_parallel_size"));
  CHECK_THAT(load_error(recipe), Catch::Contains("num_hidden_layers"));
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen3_moe", "num_hidden_layers": 4.5})";
  REQUIRE_THROWS_WITH(config::load_hf_model_config(dir.string()),
                      Catch::Contains("num_hidden_layers") && Catch::Contains("not an integer"));
  fs::remove_all(dir);
}

TEST_CASE("job sizes near 2^31 and 2^63 are refused naming the key and the limit",
          "[config][bounded]") {
  // Before, every size key took anything up to 2^31 - 1: a global batch or a mock dataset of
  // that many samples made --dry-run draw them (minutes, 20 GB) before failing or passing.
  struct Case {
    const char* key;
    const char* limit;
  };
  const Case cases[] = {{"train.global_batch_size", "1048576"},
                        {"dataset.mock_num_samples", "16777216"},
                        {"model.seq_length", "16777216"},
                        {"dataset.seq_length", "16777216"},
                        {"model.max_seqlen_per_dp_cp_rank", "16777216"},
                        {"dataset.global_batch_packing_pad_to_multiple_of", "16777216"}};
  const auto start = std::chrono::steady_clock::now();
  for (const Case& entry : cases) {
    for (const char* value : {"2147483647", "2147483648", "9223372036854775807"}) {
      const std::string error =
          load_error(config::test::valid_recipe, {std::string(entry.key) + "=" + value});
      INFO(entry.key << "=" << value);
      CHECK_THAT(error,
                 Catch::Contains(std::string(entry.key) + " (override") &&
                     Catch::Contains(std::string("too large: must be at most ") + entry.limit));
    }
    const std::string overflow =
        load_error(config::test::valid_recipe, {std::string(entry.key) + "=9223372036854775808"});
    CHECK_THAT(overflow, Catch::Contains(entry.key) && Catch::Contains("overflows"));
  }
  // At the limit itself the key is accepted (other rules may still apply).
  CHECK_THAT(load_error(config::test::valid_recipe, {"train.global_batch_size=1048576"}),
             !Catch::Contains("train.global_batch_size"));
  // Step counts cost time, not memory (nothing is drawn per step ahead of time): accepted up
  // to 2^31 - 1, refused past it.
  CHECK(load_error(config::test::valid_recipe, {"train.train_iters=2147483647"}).empty());
  CHECK_THAT(load_error(config::test::valid_recipe, {"train.train_iters=9223372036854775807"}),
             Catch::Contains("train.train_iters") && Catch::Contains("must be at most 2147483647"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));

  // HF config.json sizes near 2^31 and 2^63 (the recipe's key bounds do not apply there).
  const fs::path dir = scratch("hf_huge_sizes");
  const std::string recipe =
      "model:\n  hf_model_path: " + dir.string() + "\n" +
      config::test::valid_recipe.substr(config::test::valid_recipe.find("  context_parallel_size"));
  for (const char* field : {"vocab_size", "hidden_size", "moe_intermediate_size", "num_experts",
                            "num_attention_heads", "max_position_embeddings"}) {
    for (const char* value : {"2147483647", "9223372036854775807", "9223372036854775808"}) {
      // A context length drives no allocation (RoPE is computed per position): up to 2^32.
      if (field == std::string("max_position_embeddings") && value == std::string("2147483647"))
        continue;
      std::string json = R"({"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
          "moe_intermediate_size": 32, "max_position_embeddings": 256})";
      const std::string key = std::string("\"") + field + "\": ";
      const std::size_t at = json.find(key) + key.size();
      json.replace(at, json.find_first_of(",}", at) - at, value);
      std::ofstream(dir / "config.json") << json;
      INFO(field << " = " << value);
      CHECK_THAT(load_error(recipe), Catch::Contains(field));
    }
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  fs::remove_all(dir);
}

TEST_CASE("a deeply nested or NUL-carrying config.json is a data error naming the file",
          "[config][bounded]") {
  const fs::path dir = scratch("hf_deep");
  std::ofstream(dir / "config.json")
      << "{\"a\": " << std::string(20000, '[') << std::string(20000, ']') << "}";
  REQUIRE_THROWS_WITH(config::load_hf_model_config(dir.string()),
                      Catch::Contains("config.json:1") && Catch::Contains("nested deeper"));
  {
    std::ofstream out(dir / "config.json", std::ios::binary);
    out << R"({"model_type": "qwen3_moe"})" << '\0' << "junk";
  }
  REQUIRE_THROWS_WITH(config::load_hf_model_config(dir.string()), Catch::Contains("NUL byte"));
  fs::remove_all(dir);
}
