#pragma once
// Closed choices of the configuration. Each enum lists its spellings once, in
// `EnumTraits<E>::names` (index = enum value); the key table, the YAML loader, the error
// messages ("expected one of [...]") and docs/config.md all read them from there.

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "config/model_architecture.hpp"

namespace dyncp::config {

template <typename E>
struct EnumTraits;  // specialised below: static constexpr std::array<std::string_view, N> names

#define DYNCP_CONFIG_ENUM_NAMES(Enum, ...)                                        \
  template <>                                                                     \
  struct EnumTraits<Enum> {                                                       \
    static constexpr auto names = std::to_array<std::string_view>({__VA_ARGS__}); \
  }

// Which packing scheduler turns a global batch into microbatches x ranks.
enum class PackingScheduler { dp_balanced, default_dynamic_cp, cost_aware };
DYNCP_CONFIG_ENUM_NAMES(PackingScheduler, "dp_balanced", "default_dynamic_cp", "cost_aware");

// How sequences are padded for context parallelism: per_group pads each sequence for the
// group it runs on (2c for a group of c ranks); pool pads every sequence to 2 x dp x cp under
// dynamic CP (Megatron-Core's rule). Static CP pads to 2 x cp either way.
enum class PackingAlignment { per_group, pool };
DYNCP_CONFIG_ENUM_NAMES(PackingAlignment, "per_group", "pool");

// Which Gated DeltaNet kernel the modelled GPU step (packing/step_model.hpp) prices: the
// token-by-token recurrence, or the chunked (WY) form over chunks of 64 tokens.
enum class DeltaNetKernel { chunked, token_by_token };
DYNCP_CONFIG_ENUM_NAMES(DeltaNetKernel, "chunked", "token_by_token");

enum class DatasetType { chat_jsonl, token_jsonl, megatron_indexed, mock_varlen };
DYNCP_CONFIG_ENUM_NAMES(DatasetType, "chat_jsonl", "token_jsonl", "megatron_indexed",
                        "mock_varlen");

// Megatron's loader kinds; only the per-sample ones (single, cyclic) feed the packing scheduler.
enum class DataloaderType { single, cyclic, batch, external };
DYNCP_CONFIG_ENUM_NAMES(DataloaderType, "single", "cyclic", "batch", "external");

// What happens to a sample longer than seq_length.
enum class TruncationPolicy { drop, truncate, error };
DYNCP_CONFIG_ENUM_NAMES(TruncationPolicy, "drop", "truncate", "error");

enum class BadSamplePolicy { error, skip };
DYNCP_CONFIG_ENUM_NAMES(BadSamplePolicy, "error", "skip");

enum class TokenizerType { HuggingFaceTokenizer, NullTokenizer };
DYNCP_CONFIG_ENUM_NAMES(TokenizerType, "HuggingFaceTokenizer", "NullTokenizer");

enum class ChatTemplate { qwen_chatml };
DYNCP_CONFIG_ENUM_NAMES(ChatTemplate, "qwen_chatml");

enum class Device { auto_detect, cpu, cuda };
DYNCP_CONFIG_ENUM_NAMES(Device, "auto", "cpu", "cuda");

// How a CP group exchanges K/V. a2a and a2a+p2p are Megatron spellings we recognise and refuse.
enum class CpCommType { all_gather, p2p, a2a, a2a_p2p };
DYNCP_CONFIG_ENUM_NAMES(CpCommType, "all_gather", "p2p", "a2a", "a2a+p2p");

// Which attention implementation the GPU path runs: auto (cuDNN's fused attention where its support
// check passes for the model's shapes, else our own kernel), flash (our own kernel), fused
// (cuDNN, refused at start-up where it cannot run). Megatron's AttnBackend names; its unfused and
// local are not built.
enum class AttentionBackend { auto_select, flash, fused };
DYNCP_CONFIG_ENUM_NAMES(AttentionBackend, "auto", "flash", "fused");

enum class RecomputeGranularity { full, selective };
DYNCP_CONFIG_ENUM_NAMES(RecomputeGranularity, "full", "selective");

enum class RecomputeMethod { uniform, block };
DYNCP_CONFIG_ENUM_NAMES(RecomputeMethod, "uniform", "block");

enum class LrDecayStyle { constant, linear, cosine };
DYNCP_CONFIG_ENUM_NAMES(LrDecayStyle, "constant", "linear", "cosine");

enum class WeightDecayIncrStyle { constant, linear, cosine };
DYNCP_CONFIG_ENUM_NAMES(WeightDecayIncrStyle, "constant", "linear", "cosine");

enum class StateDType { float32, bfloat16 };
DYNCP_CONFIG_ENUM_NAMES(StateDType, "float32", "bfloat16");

enum class MixedPrecision { fp32, bf16_mixed };
DYNCP_CONFIG_ENUM_NAMES(MixedPrecision, "fp32", "bf16_mixed");

enum class OptimizerType { adam };
DYNCP_CONFIG_ENUM_NAMES(OptimizerType, "adam");

enum class LoadBalancingType { aux_loss, none };
DYNCP_CONFIG_ENUM_NAMES(LoadBalancingType, "aux_loss", "none");

DYNCP_CONFIG_ENUM_NAMES(LayerMixer, "full_attention", "linear_attention");

#undef DYNCP_CONFIG_ENUM_NAMES

template <typename E>
std::string to_string(E value) {
  return std::string(EnumTraits<E>::names[static_cast<std::size_t>(value)]);
}

template <typename E>
std::optional<E> parse_enum(std::string_view text) {
  for (std::size_t i = 0; i < EnumTraits<E>::names.size(); ++i) {
    if (EnumTraits<E>::names[i] == text) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace dyncp::config
