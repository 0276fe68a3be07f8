#include "core/arena.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace dyncp::core {
namespace {

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void free_block(std::byte* memory) {
  std::free(memory);
}

void free_device_block(std::byte* memory) {
  device_memory().release(memory);
}

}  // namespace

Arena::Arena(std::string name, std::size_t block_bytes, Device device)
    : name_(std::move(name)),
      block_bytes_(round_up(block_bytes == 0 ? kAlignment : block_bytes, kAlignment)),
      device_(device) {}

Arena::Arena(Arena&&) noexcept = default;
Arena& Arena::operator=(Arena&&) noexcept = default;
Arena::~Arena() = default;

void* Arena::bump(std::size_t bytes) {
  const std::size_t needed = round_up(bytes == 0 ? 1 : bytes, kAlignment);
  // Walk forward from the current block: the same request sequence after reset() lands in the
  // same blocks, so steady-state steps never reach the allocation below.
  while (current_block_ < blocks_.size()) {
    Block& block = blocks_[current_block_];
    if (current_offset_ + needed <= block.size) {
      void* result = block.memory.get() + current_offset_;
      current_offset_ += needed;
      note_usage();
      return result;
    }
    if (current_block_ + 1 == blocks_.size()) break;
    ++current_block_;
    current_offset_ = 0;
  }
  const std::size_t size = std::max(block_bytes_, needed);
  auto* memory = device_ == Device::cuda
                     ? static_cast<std::byte*>(device_memory().allocate(size))
                     : static_cast<std::byte*>(std::aligned_alloc(kAlignment, size));
  if (memory == nullptr) {
    throw_runtime_error("Arena '" + name_ + "': out of memory growing by " + std::to_string(size) +
                        " bytes (capacity " + std::to_string(capacity_bytes()) + ")");
  }
  Block block;
  block.memory = std::unique_ptr<std::byte[], void (*)(std::byte*)>(
      memory, device_ == Device::cuda ? &free_device_block : &free_block);
  block.size = size;
  blocks_.push_back(std::move(block));
  ++num_block_allocations_;
  current_block_ = blocks_.size() - 1;
  current_offset_ = needed;
  note_usage();
  return memory;
}

void Arena::note_usage() {
  const std::size_t in_use = bytes_in_use();
  if (in_use > high_water_bytes_) high_water_bytes_ = in_use;
}

Tensor Arena::allocate(const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  return Tensor::view_of(bump(bytes), shape, dtype, device_);
}

Tensor Arena::zeros(const Shape& shape, DType dtype) {
  Tensor tensor = allocate(shape, dtype);
  tensor.fill_zero();
  return tensor;
}

void Arena::release(const Mark& mark) {
  if (mark.block > current_block_ ||
      (mark.block == current_block_ && mark.offset > current_offset_)) {
    throw_runtime_error("Arena '" + name_ + "': release to a mark past the current position");
  }
  current_block_ = mark.block;
  current_offset_ = mark.offset;
}

void Arena::reset() {
  if (high_water_bytes_ > logged_high_water_bytes_) {
    spdlog::debug("arena '{}': high-water mark {:.2f} MiB in {} block(s), capacity {:.2f} MiB",
                  name_, static_cast<double>(high_water_bytes_) / (1 << 20), blocks_.size(),
                  static_cast<double>(capacity_bytes()) / (1 << 20));
    logged_high_water_bytes_ = high_water_bytes_;
  }
  current_block_ = 0;
  current_offset_ = 0;
}

std::size_t Arena::bytes_in_use() const {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < current_block_ && i < blocks_.size(); ++i) bytes += blocks_[i].size;
  return bytes + current_offset_;
}

std::size_t Arena::capacity_bytes() const {
  std::size_t bytes = 0;
  for (const Block& block : blocks_) bytes += block.size;
  return bytes;
}

}  // namespace dyncp::core
