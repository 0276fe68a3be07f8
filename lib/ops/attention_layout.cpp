#include "ops/attention_layout.hpp"

#include <string>

#include "ops/cu_seqlens_check.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops::detail {
namespace {

void check_positions(std::string_view op, std::string_view name, const Tensor& positions,
                     std::int64_t tokens) {
  require_dtype(op, name, positions, DType::i32);
  require_shape(op, name, positions, Shape{tokens});
  if (positions.device() != Device::cpu) return;  // device data: the bin builder made them
  const std::int32_t* p = positions.data<std::int32_t>();
  for (std::int64_t i = 0; i < tokens; ++i) {
    if (p[i] < 0) fail(op, std::string(name) + "[" + std::to_string(i) + "] is negative");
  }
}

}  // namespace

void check_attention_layout(std::string_view op, const VarlenAttentionLayout& layout,
                            std::int64_t q_tokens, std::int64_t kv_tokens) {
  check_cu_seqlens(op, "layout.q_cu_seqlens", layout.q_cu_seqlens, q_tokens);
  check_cu_seqlens(op, "layout.kv_cu_seqlens", layout.kv_cu_seqlens, kv_tokens);
  if (layout.q_cu_seqlens.size(0) != layout.kv_cu_seqlens.size(0)) {
    fail(op, "q_cu_seqlens " + layout.q_cu_seqlens.describe() + " and kv_cu_seqlens " +
                 layout.kv_cu_seqlens.describe() + " must describe the same number of sequences");
  }
  check_positions(op, "layout.q_positions", layout.q_positions, q_tokens);
  check_positions(op, "layout.kv_positions", layout.kv_positions, kv_tokens);
  if (layout.sliding_window < 0)
    fail(op, "sliding_window " + std::to_string(layout.sliding_window) + " must be >= 0");
}

}  // namespace dyncp::ops::detail
