#pragma once
// An HF export users can load and chat with: model::save_hf_checkpoint writes config.json and
// the weights; this adds what transformers needs around them.
//
//   config.json             torch_dtype / dtype say what the tensors are (bfloat16 or float32)
//   tokenizer files          every file of the training tokenizer's folder except weights and
//                            the model's config (tokenizer.json, tokenizer_config.json,
//                            chat_template.jinja, special_tokens_map.json, vocab/merges, ...)
//   generation_config.json   copied from the tokenizer folder when it has one, else written
//                            from the model's bos / eos token ids

#include <cstdint>
#include <filesystem>
#include <string>

#include "config/model_architecture.hpp"
#include "model/safetensors.hpp"

namespace dyncp::train {

// `tokenizer_dir` empty: no tokenizer files (the export then cannot apply a chat template).
void complete_hf_export(const std::filesystem::path& out,
                        const std::filesystem::path& tokenizer_dir, model::StoredDType dtype,
                        const config::ModelArchitecture& architecture);

// Weights past this many bytes are split into model-0000k-of-0000n.safetensors files listed by
// model.safetensors.index.json, as transformers' save_pretrained does (max_shard_size "5GB").
inline constexpr std::uint64_t hf_export_shard_bytes = 5'000'000'000;

// "bfloat16", "float32", "float16": the torch dtype name of a stored dtype.
std::string torch_dtype_name(model::StoredDType dtype);

}  // namespace dyncp::train
