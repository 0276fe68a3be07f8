#include "core/arena.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "core/alloc_counter.hpp"
#include "core/error.hpp"

using dyncp::core::AllocationCounter;
using dyncp::core::Arena;
using dyncp::core::ArenaScope;
using dyncp::core::DType;
using dyncp::core::Shape;
using dyncp::core::Tensor;

namespace {

// One "step": a fixed sequence of requests of different sizes, some larger than a block.
void simulated_step(Arena& arena) {
  arena.reset();
  for (int i = 0; i < 20; ++i) {
    Tensor t = arena.allocate(Shape{37 + i * 101}, DType::f32);
    t.data<float>()[0] = static_cast<float>(i);
  }
  Tensor big = arena.allocate(Shape{3000}, DType::f64);  // 24 KB > 16 KB block
  big.data<double>()[2999] = 1.0;
  {
    ArenaScope scope(arena);
    Tensor scratch = arena.zeros(Shape{100, 7}, DType::f32);
    CHECK(scratch.data<float>()[699] == 0.0F);
  }
}

}  // namespace

TEST_CASE("arena views are aligned, disjoint and grow only when needed", "[core][arena]") {
  Arena arena("test", 4096);
  Tensor a = arena.allocate(Shape{3}, DType::f32);
  Tensor b = arena.allocate(Shape{5}, DType::f64);
  CHECK(reinterpret_cast<std::uintptr_t>(a.raw_data()) % Arena::kAlignment == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(b.raw_data()) % Arena::kAlignment == 0);
  CHECK(static_cast<std::byte*>(b.raw_data()) >= static_cast<std::byte*>(a.raw_data()) + 12);
  CHECK(arena.num_blocks() == 1);
  Tensor big = arena.allocate(Shape{2000}, DType::f32);  // 8000 bytes: its own block
  CHECK(arena.num_blocks() == 2);
  CHECK(arena.capacity_bytes() >= 4096 + 8000);
  const auto mark = arena.mark();
  arena.allocate(Shape{10}, DType::f32);  // the big block is full: a third block
  CHECK(arena.num_blocks() == 3);
  const std::size_t used = arena.bytes_in_use();
  arena.release(mark);
  CHECK(arena.bytes_in_use() < used);
  CHECK(arena.high_water_bytes() >= used);
  arena.reset();
  CHECK(arena.bytes_in_use() == 0);
  CHECK(arena.num_blocks() == 3);
  CHECK_THROWS_AS(arena.release(mark), dyncp::core::Error);
}

TEST_CASE("steady-state steps make no heap allocation", "[core][arena][alloc]") {
  Arena arena("steps", 16 * 1024);
  for (int warm_up = 0; warm_up < 2; ++warm_up) simulated_step(arena);
  const std::size_t high_water = arena.high_water_bytes();
  const std::uint64_t blocks = arena.num_block_allocations();

  AllocationCounter counter;
  for (int step = 0; step < 10; ++step) simulated_step(arena);
  const std::uint64_t allocations = counter.count();
  CHECK(allocations == 0);
  CHECK(arena.high_water_bytes() == high_water);
  CHECK(arena.num_block_allocations() == blocks);
}

TEST_CASE("the allocation counter sees heap allocations", "[core][alloc]") {
  AllocationCounter counter;
  // Direct calls: unlike new-expressions, the compiler may not elide them.
  void* volatile memory = ::operator new(64);
  const std::uint64_t seen = counter.count();
  ::operator delete(memory);
  CHECK(seen == 1);
}
