#include "train/hf_export.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/output_file.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

// Files of an HF model folder that are not the tokenizer's: the weights and the model config,
// which the export writes itself.
bool is_model_file(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string extension = path.extension().string();
  return name == "config.json" || name.ends_with(".safetensors.index.json") ||
         extension == ".safetensors" || extension == ".bin" || extension == ".pt" ||
         extension == ".pth" || extension == ".gguf" || extension == ".msgpack" ||
         extension == ".h5" || name.front() == '.';
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) core::throw_runtime_error("cannot read " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& error) {
    core::throw_data_error(path.string(), std::string("not valid JSON: ") + error.what());
  }
  return {};
}

void write_json(const fs::path& path, const nlohmann::json& json) {
  core::OutputFile out(path);
  out.write(json.dump(2) + "\n");
  out.close();
}

// The id of tokenizer_config.json's `field` token ("<|im_end|>" or {"content": ...}), looked up
// in tokenizer.json's added tokens; -1 when either is missing.
std::int64_t special_token_id(const fs::path& tokenizer_dir, const char* field) {
  if (tokenizer_dir.empty() || !fs::exists(tokenizer_dir / "tokenizer_config.json") ||
      !fs::exists(tokenizer_dir / "tokenizer.json"))
    return -1;
  const nlohmann::json config = read_json(tokenizer_dir / "tokenizer_config.json");
  if (!config.contains(field)) return -1;
  const nlohmann::json& token = config[field];
  const std::string content = token.is_string() ? token.get<std::string>()
                              : token.is_object() && token.contains("content")
                                  ? token["content"].get<std::string>()
                                  : std::string();
  if (content.empty()) return -1;
  const nlohmann::json tokenizer = read_json(tokenizer_dir / "tokenizer.json");
  for (const auto& added : tokenizer.value("added_tokens", nlohmann::json::array())) {
    if (added.value("content", "") == content) return added.value("id", std::int64_t{-1});
  }
  return -1;
}

}  // namespace

std::string torch_dtype_name(model::StoredDType dtype) {
  switch (dtype) {
    case model::StoredDType::bf16:
      return "bfloat16";
    case model::StoredDType::f16:
      return "float16";
    case model::StoredDType::f32:
      return "float32";
    default:
      core::throw_runtime_error(std::string("no torch dtype name for stored dtype ") +
                                model::stored_dtype_name(dtype));
  }
  return {};
}

void complete_hf_export(const fs::path& out, const fs::path& tokenizer_dir,
                        model::StoredDType dtype, const config::ModelArchitecture& architecture) {
  // transformers 4 reads torch_dtype, transformers 5 dtype: both name the stored tensors.
  const fs::path config_path = out / "config.json";
  nlohmann::json config = read_json(config_path);
  config["torch_dtype"] = torch_dtype_name(dtype);
  config["dtype"] = torch_dtype_name(dtype);
  write_json(config_path, config);

  bool copied_generation_config = false;
  if (!tokenizer_dir.empty()) {
    if (!fs::is_directory(tokenizer_dir)) {
      core::throw_config_error("tokenizer.tokenizer_model",
                               tokenizer_dir.string() + ": not a folder to copy into the export");
    }
    for (const auto& entry : fs::directory_iterator(tokenizer_dir)) {
      if (!entry.is_regular_file() || is_model_file(entry.path())) continue;
      fs::copy_file(entry.path(), out / entry.path().filename(),
                    fs::copy_options::overwrite_existing);
      copied_generation_config |= entry.path().filename() == "generation_config.json";
    }
  }
  if (!copied_generation_config) {
    // The model config's ids first; the tokenizer's special tokens where it has none (a chat
    // model stops at its turn end, tokenizer_config.json's eos_token).
    const auto pick = [&](std::int64_t from_model, const char* field) {
      return from_model >= 0 ? from_model : special_token_id(tokenizer_dir, field);
    };
    const std::int64_t bos = pick(architecture.bos_token_id, "bos_token");
    const std::int64_t eos = pick(architecture.eos_token_id, "eos_token");
    const std::int64_t pad = pick(architecture.pad_token_id, "pad_token");
    nlohmann::json generation = nlohmann::json::object();
    if (bos >= 0) generation["bos_token_id"] = bos;
    if (eos >= 0) generation["eos_token_id"] = eos;
    if (pad >= 0 || eos >= 0) generation["pad_token_id"] = pad >= 0 ? pad : eos;
    write_json(out / "generation_config.json", generation);
  }
}

}  // namespace dyncp::train
