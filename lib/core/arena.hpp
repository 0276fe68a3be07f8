#pragma once
// Arena: a grow-only bump allocator that hands out Tensor views over a few large blocks.
//
// Life cycle in the step loop: allocate views during a step, reset() at the start of the next
// one. Blocks are never freed before the arena is destroyed, and a step that makes the same
// sequence of requests as an earlier one lands in the same places, so after the first steps
// (the high-water mark) an arena performs no heap allocation at all. reset() logs once whenever
// the high-water mark has grown, so the plan can be compared with the --dry-run estimate.
//
// mark()/release(mark) free everything allocated after the mark (stack discipline), which is
// how ops take temporary scratch from an arena and give it back before they return.
//
// Views are 64-byte aligned. Device::cuda arenas take their blocks from the installed CUDA
// backend (core/device_memory.hpp).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace dyncp::core {

class Arena {
 public:
  static constexpr std::size_t kDefaultBlockBytes = std::size_t{64} << 20;  // 64 MiB
  static constexpr std::size_t kAlignment = 64;

  explicit Arena(std::string name, std::size_t block_bytes = kDefaultBlockBytes,
                 Device device = Device::cpu);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&&) noexcept;
  Arena& operator=(Arena&&) noexcept;
  ~Arena();

  // Uninitialised view. Grows (one heap allocation of max(block_bytes, request)) only when no
  // existing block has room at the current position.
  Tensor allocate(const Shape& shape, DType dtype);
  // Same, then zero-filled.
  Tensor zeros(const Shape& shape, DType dtype);

  // Position to return to; cheap value type.
  struct Mark {
    std::size_t block = 0;
    std::size_t offset = 0;
  };
  Mark mark() const { return {current_block_, current_offset_}; }
  // Every view allocated after `mark` becomes invalid.
  void release(const Mark& mark);

  // Invalidates every view; keeps all blocks. Logs (info) when the high-water mark grew since
  // the previous reset.
  void reset();

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  // Bytes handed out since the last reset (including alignment padding and block tails skipped).
  std::size_t bytes_in_use() const;
  // Largest bytes_in_use() ever seen.
  std::size_t high_water_bytes() const { return high_water_bytes_; }
  // Sum of all block sizes.
  std::size_t capacity_bytes() const;
  std::size_t num_blocks() const { return blocks_.size(); }
  // Number of times a block was allocated (grows only during warm-up).
  std::uint64_t num_block_allocations() const { return num_block_allocations_; }

 private:
  struct Block {
    std::unique_ptr<std::byte[], void (*)(std::byte*)> memory{nullptr, nullptr};
    std::size_t size = 0;
  };
  void* bump(std::size_t bytes);
  void note_usage();

  std::string name_;
  std::size_t block_bytes_;
  Device device_;
  std::vector<Block> blocks_;
  std::size_t current_block_ = 0;
  std::size_t current_offset_ = 0;
  std::size_t high_water_bytes_ = 0;
  std::size_t logged_high_water_bytes_ = 0;
  std::uint64_t num_block_allocations_ = 0;
};

// Releases back to a mark when it goes out of scope (scratch inside an op).
class ArenaScope {
 public:
  explicit ArenaScope(Arena& arena) : arena_(arena), mark_(arena.mark()) {}
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;
  ~ArenaScope() { arena_.release(mark_); }

 private:
  Arena& arena_;
  Arena::Mark mark_;
};

}  // namespace dyncp::core
