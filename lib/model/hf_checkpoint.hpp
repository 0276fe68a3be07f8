#pragma once
// Hugging Face checkpoint folders in and out: config.json plus safetensors (single file or
// sharded with model.safetensors.index.json), tensor names exactly HF's (qwen-moe.md §4.2).

#include <cstdint>
#include <memory>
#include <string>

#include "model/qwen3_moe_model.hpp"
#include "model/safetensors.hpp"
#include "model/whole_model_tensors.hpp"

namespace dyncp::model {

class ExpertGather;
struct WholeModelGathers;

// Copies every HF tensor of `parameters` from the checkpoint folder (converted to f32).
// A missing tensor, an extra one, or one whose shape differs is a data error naming the tensor
// and both shapes. Tensors of parts this text model does not have (mtp.*, model.visual.*) are
// skipped; so is a redundant lm_head.weight when the embeddings are tied. Parameters holding
// an expert slice read only their experts (and skip the others' tensors).
void load_hf_weights(const std::string& folder, const Qwen3MoeParameters& parameters);

// Reads config.json, builds the model and loads its weights.
std::unique_ptr<Qwen3MoeModel> load_hf_model(const std::string& folder, ModelOptions options = {});

// Writes config.json and the weights (stored as `dtype`: F32, BF16 or F16), sharded when they
// exceed max_shard_bytes (0 = one file). Every expert is written. When `parameters` hold an
// expert slice, every rank of the expert-parallel group calls this with its `gather`
// (collective, model/whole_model_tensors.hpp) and only the one with `write` writes. When
// `parameters` hold one pipeline stage, the writer, the other stages' relays and their EP groups
// call it with `relay` (route_through_stages).
void save_hf_checkpoint(const std::string& folder, const Qwen3MoeParameters& parameters,
                        StoredDType dtype = StoredDType::bf16, std::uint64_t max_shard_bytes = 0,
                        ExpertGather* gather = nullptr, bool write = true,
                        StageTensorRelay* relay = nullptr);
// The same from a rank that may hold pieces of tensors (tensor parallelism): every rank taking
// part in `gathers` calls this, and the one with `write` writes (model/whole_model_tensors.hpp).
void save_hf_checkpoint(const std::string& folder, const Qwen3MoeParameters& parameters,
                        StoredDType dtype, std::uint64_t max_shard_bytes,
                        const WholeModelGathers& gathers, bool write,
                        StageTensorRelay* relay = nullptr);

// Whether an export of `architecture` stores each MoE layer's experts fused
// (`mlp.experts.gate_up_proj` [E, 2I, h], `mlp.experts.down_proj` [E, h, I]) rather than one
// tensor per expert: what transformers' own class for the model type saves.
bool export_fuses_experts(const config::ModelArchitecture& architecture);

}  // namespace dyncp::model
