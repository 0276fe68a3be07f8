#pragma once
// Validation of a cu_seqlens tensor (internal to lib/ops): i32 [S + 1] on the host, from 0 to
// `tokens`, non-decreasing. Throws naming `op`; returns S.

#include <cstdint>
#include <string>
#include <string_view>

#include "ops/op_checks.hpp"

namespace dyncp::ops::detail {

inline std::int64_t check_cu_seqlens(std::string_view op, std::string_view name, const Tensor& cu,
                                     std::int64_t tokens) {
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
  return n - 1;
}

}  // namespace dyncp::ops::detail
