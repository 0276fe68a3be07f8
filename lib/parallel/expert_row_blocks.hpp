#pragma once
// Expert rows held in (source, expert) blocks: counts[s * experts + e] rows of expert e came
// from (or go back to) source s. The exchanges move rows in source-major order (every expert
// of source 0, then of source 1, ...); the grouped expert products want expert-major order
// (expert 0 of every source, then expert 1, ...). regroup_expert_blocks moves the blocks
// between the two, one row copy per block, converting where `from` and `to` differ in dtype.

#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace dyncp::parallel {

// `padded_source_rows` > 0: on the source-major side source s's blocks start at row
// s * padded_source_rows (a padded layout for equal-size collectives) instead of right after
// source s - 1's. `cursor` is caller-owned scratch (kept between calls: no allocation).
void regroup_expert_blocks(const ops::OpContext& ctx, const std::int64_t* counts,
                           std::int64_t sources, std::int64_t experts, const core::Tensor& from,
                           const core::Tensor& to, bool source_major_to_expert_major,
                           std::vector<std::int64_t>& cursor, std::int64_t padded_source_rows = 0);

}  // namespace dyncp::parallel
