// HF checkpoint folders: save → load round trips (single file and sharded) and bad folders,
// each an exit-2 data error naming the tensor or field.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.hpp"
#include "model_test_support.hpp"

namespace dyncp::model {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_dir("hf_" + name);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void require_data_error(const std::function<void()>& action,
                        const std::vector<std::string>& parts) {
  try {
    action();
    FAIL("expected a data error");
  } catch (const core::Error& error) {
    CHECK(error.exit_code() == 2);
    for (const auto& part : parts) CHECK_THAT(error.what(), Catch::Contains(part));
  }
}

TEST_CASE("saving and loading an HF checkpoint reproduces the loss exactly",
          "[model][checkpoint]") {
  const auto fixture = testing::fixture_dir("qwen3_moe_b_tied_unnormalized");
  const auto original = load_hf_model(fixture);
  const auto sequences = read_batch_json(fixture + "/batch.json");
  const auto reference = testing::run_batch(*original, sequences);
  const std::uint64_t shard_bytes = GENERATE(std::uint64_t{0}, std::uint64_t{100000});
  const auto dir = fresh_dir("roundtrip_" + std::to_string(shard_bytes));
  save_hf_checkpoint(dir.string(), original->parameters(), StoredDType::f32, shard_bytes);
  CHECK(fs::exists(dir / "config.json"));
  CHECK(
      fs::exists(dir / (shard_bytes == 0 ? "model.safetensors" : "model.safetensors.index.json")));
  const auto reloaded = load_hf_model(dir.string());
  CHECK(reloaded->architecture().tie_word_embeddings);
  CHECK_FALSE(reloaded->architecture().norm_topk_prob);
  const auto again = testing::run_batch(*reloaded, sequences);
  CHECK(again.result.loss_sum == reference.result.loss_sum);
  CHECK(again.grads == reference.grads);
}

TEST_CASE("bad HF checkpoint folders are data errors naming what is wrong", "[model][checkpoint]") {
  const auto fixture = testing::fixture_dir("qwen3_moe_a");
  const auto original = load_hf_model(fixture);
  const auto dir = fresh_dir("bad");
  save_hf_checkpoint(dir.string(), original->parameters(), StoredDType::bf16);
  const auto config_text = read_text(dir / "config.json");
  const auto write_config = [&](const std::string& text) {
    std::ofstream(dir / "config.json") << text;
  };
  const auto load = [&] { load_hf_model(dir.string()); };

  SECTION("missing config.json") {
    fs::remove(dir / "config.json");
    require_data_error(load, {"config.json"});
  }
  SECTION("missing weights") {
    fs::remove(dir / "model.safetensors");
    require_data_error(load, {"no model.safetensors"});
  }
  SECTION("unknown model_type") {
    write_config(std::regex_replace(config_text, std::regex("qwen3_moe"), "llama"));
    require_data_error(load, {"config.json", "model_type 'llama'"});
  }
  SECTION("weights of another model_type") {
    // Relabelled as the hybrid family, whose layer 0 is a Gated DeltaNet layer.
    write_config(std::regex_replace(config_text, std::regex("\"qwen3_moe\""), "\"qwen3_next\""));
    require_data_error(load, {"model.layers.0.linear_attn.in_proj_qkvz.weight", "missing"});
  }
  SECTION("a tensor with the wrong shape") {
    write_config(std::regex_replace(config_text, std::regex("\"moe_intermediate_size\": *48"),
                                    "\"moe_intermediate_size\": 40"));
    require_data_error(load,
                       {"model.layers.1.mlp.experts.0.gate_proj.weight", "[48, 64]", "[40, 64]"});
  }
  SECTION("a missing tensor") {
    write_config(std::regex_replace(config_text, std::regex("\"num_hidden_layers\": *3"),
                                    "\"num_hidden_layers\": 4"));
    require_data_error(load, {"model.layers.3.input_layernorm.weight", "missing"});
  }
  SECTION("an extra tensor") {
    write_config(std::regex_replace(config_text, std::regex("\"num_hidden_layers\": *3"),
                                    "\"num_hidden_layers\": 2"));
    require_data_error(load, {"unexpected tensor 'model.layers.2."});
  }
  SECTION("a truncated weights file") {
    fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
    require_data_error(load, {"model.safetensors", "past the data buffer"});
  }
}

}  // namespace
}  // namespace dyncp::model

namespace dyncp::model {
namespace {

TEST_CASE("an expert range loads only this rank's experts, by their global HF names",
          "[model][checkpoint]") {
  const auto fixture = testing::fixture_dir("qwen3_moe_a");
  const auto full = load_hf_model(fixture);
  ModelOptions options;
  options.experts = {2, 3};
  const auto sliced = load_hf_model(fixture, options);
  const auto& layer = sliced->parameters().layers[1];
  CHECK(layer.moe.experts.first_expert == 2);
  CHECK(layer.moe.experts.gate_up.value.size(0) == 3);
  CHECK(sliced->parameters().find("model.layers.1.mlp.experts.1.up_proj.weight") == nullptr);
  CHECK(sliced->parameters().find("model.layers.1.mlp.experts.5.up_proj.weight") == nullptr);
  for (const auto& tensor : sliced->parameters().hf_tensors()) {
    const auto* reference = full->parameters().find(tensor.name);
    REQUIRE(reference != nullptr);
    INFO(tensor.name);
    CHECK(std::equal(tensor.value.data<float>(), tensor.value.data<float>() + tensor.value.numel(),
                     reference->value.data<float>()));
  }
  ModelOptions outside;
  outside.experts = {6, 3};
  CHECK_THROWS_WITH(load_hf_model(fixture, outside), Catch::Contains("model.num_experts"));
}

}  // namespace
}  // namespace dyncp::model

namespace dyncp::model {
namespace {

// The header of a safetensors file, as name -> (dtype, shape), and its metadata.
std::map<std::string, std::pair<std::string, std::vector<std::int64_t>>> tensor_layout(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  const SafetensorsFile file(path);
  std::map<std::string, std::pair<std::string, std::vector<std::int64_t>>> layout;
  for (const auto& tensor : file.header().tensors)
    layout[tensor.name] = {stored_dtype_name(tensor.dtype), tensor.shape};
  if (metadata != nullptr) *metadata = file.header().metadata;
  return layout;
}

TEST_CASE("an HF export has the layout transformers itself writes", "[model][checkpoint]") {
  // The fixture folder was written by transformers (tools/golden/model); an export of the same
  // model must have the same tensor names, dtypes (BF16), shapes, header metadata and the
  // config.json keys transformers wrote.
  const auto fixture = testing::fixture_dir("qwen3_moe_a");
  const auto model = load_hf_model(fixture);
  const auto dir = fs::temp_directory_path() / "dyncp_model_hf_export_layout";
  fs::remove_all(dir);
  fs::create_directories(dir);
  save_hf_checkpoint(dir.string(), model->parameters(), StoredDType::bf16);

  std::map<std::string, std::string> hf_metadata, our_metadata;
  const auto hf = tensor_layout(fixture + "/model.safetensors", &hf_metadata);
  const auto ours = tensor_layout((dir / "model.safetensors").string(), &our_metadata);
  CHECK(ours == hf);
  CHECK(our_metadata == hf_metadata);

  const auto hf_config = nlohmann::json::parse(read_text(fs::path(fixture) / "config.json"));
  const auto our_config = nlohmann::json::parse(read_text(dir / "config.json"));
  for (const auto& [key, value] : hf_config.items()) {
    INFO(key);
    REQUIRE(our_config.contains(key));
    CHECK(our_config[key] == value);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dyncp::model
