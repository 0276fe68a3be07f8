#include "ops/attention_layout.hpp"

#include <string>

#include "ops/op_checks.hpp"

namespace dyncp::ops::detail {
namespace {

void check_cu(std::string_view op, std::string_view name, const Tensor& cu, std::int64_t tokens) {
  require_dtype(op, name, cu, DType::i32);
  require_rank(op, name, cu, 1);
  if (cu.device() != Device::cpu) fail(op, std::string(name) + " must be on the host");
  if (cu.size(0) < 1) fail(op, std::string(name) + " must hold at least one entry (0)");
  const std::int32_t* v = cu.data<std::int32_t>();
  const std::int64_t n = cu.size(0);
  if (v[0] != 0 || v[n - 1] != tokens) {
    fail(op, std::string(name) + " must run from 0 to " + std::to_string(tokens) + ", got " +
                 std::to_string(v[0]) + " .. " + std::to_string(v[n - 1]));
  }
  for (std::int64_t i = 1; i < n; ++i) {
    if (v[i] < v[i - 1]) {
      fail(op, std::string(name) + " must be non-decreasing; entry " + std::to_string(i) + " = " +
                   std::to_string(v[i]) + " < " + std::to_string(v[i - 1]));
    }
  }
}

void check_positions(std::string_view op, std::string_view name, const Tensor& positions,
                     std::int64_t tokens) {
  require_dtype(op, name, positions, DType::i32);
  require_shape(op, name, positions, Shape{tokens});
  const std::int32_t* p = positions.data<std::int32_t>();
  for (std::int64_t i = 0; i < tokens; ++i) {
    if (p[i] < 0) fail(op, std::string(name) + "[" + std::to_string(i) + "] is negative");
  }
}

}  // namespace

void check_attention_layout(std::string_view op, const VarlenAttentionLayout& layout,
                            std::int64_t q_tokens, std::int64_t kv_tokens) {
  check_cu(op, "layout.q_cu_seqlens", layout.q_cu_seqlens, q_tokens);
  check_cu(op, "layout.kv_cu_seqlens", layout.kv_cu_seqlens, kv_tokens);
  if (layout.q_cu_seqlens.size(0) != layout.kv_cu_seqlens.size(0)) {
    fail(op, "q_cu_seqlens " + layout.q_cu_seqlens.describe() + " and kv_cu_seqlens " +
                 layout.kv_cu_seqlens.describe() + " must describe the same number of sequences");
  }
  check_positions(op, "layout.q_positions", layout.q_positions, q_tokens);
  check_positions(op, "layout.kv_positions", layout.kv_positions, kv_tokens);
}

}  // namespace dyncp::ops::detail
