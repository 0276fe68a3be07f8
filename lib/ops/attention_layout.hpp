#pragma once
// Validation of a VarlenAttentionLayout against q / k (internal to lib/ops).

#include <string_view>

#include "ops/attention.hpp"

namespace dyncp::ops::detail {

// Checks dtypes (i32), shapes, cu_seqlens monotonic from 0 to Tq / Tk with the same number of
// sequences, positions >= 0. Throws naming `op`.
void check_attention_layout(std::string_view op, const VarlenAttentionLayout& layout,
                            std::int64_t q_tokens, std::int64_t kv_tokens);

}  // namespace dyncp::ops::detail
