#include "parallel/expert_row_blocks.hpp"

#include "ops/elementwise.hpp"
#include "parallel/row_copy.hpp"

namespace dyncp::parallel {

void regroup_expert_blocks(const ops::OpContext& ctx, const std::int64_t* counts,
                           std::int64_t sources, std::int64_t experts, const core::Tensor& from,
                           const core::Tensor& to, bool source_major_to_expert_major,
                           std::vector<std::int64_t>& cursor, std::int64_t padded_source_rows) {
  const auto move = [&](std::int64_t from_row, std::int64_t to_row, std::int64_t count) {
    if (from.dtype() == to.dtype()) return copy_rows(from, from_row, to, to_row, count);
    if (count > 0)
      ops::convert(ctx, from.slice(from_row, from_row + count), to.slice(to_row, to_row + count));
  };
  // cursor[s]: where the next (s, e) block starts in source-major order. Walking the blocks in
  // expert-major order visits each source's experts in ascending order.
  cursor.resize(static_cast<std::size_t>(sources));
  std::int64_t start = 0;
  for (std::int64_t s = 0; s < sources; ++s) {
    if (padded_source_rows > 0) start = s * padded_source_rows;
    cursor[static_cast<std::size_t>(s)] = start;
    for (std::int64_t e = 0; e < experts; ++e) start += counts[s * experts + e];
  }
  std::int64_t expert_major_offset = 0;
  for (std::int64_t e = 0; e < experts; ++e) {
    for (std::int64_t s = 0; s < sources; ++s) {
      std::int64_t& source_major_offset = cursor[static_cast<std::size_t>(s)];
      const std::int64_t block = counts[s * experts + e];
      // Device rows move by device copies (row_copy.hpp), one per (source, expert) block.
      if (source_major_to_expert_major) {
        move(source_major_offset, expert_major_offset, block);
      } else {
        move(expert_major_offset, source_major_offset, block);
      }
      expert_major_offset += block;
      source_major_offset += block;
    }
  }
}

}  // namespace dyncp::parallel
