#pragma once
// Process-wide count of heap allocations, for the "no allocation in the step loop" rule.
//
// alloc_counter.cpp replaces the global operator new / delete family with versions that count
// calls (one relaxed atomic increment) and forward to malloc / aligned_alloc / free. The linker
// takes it from the dyncp_core archive for every program that uses operator new, so every
// binary of the project counts, and the trainer can log the count per step as well.
// A test measures  heap_allocation_count()  before and after a few warmed-up steps and requires
// the difference to be zero.

#include <cstdint>

namespace dyncp::core {

// Number of operator new calls (all forms) in this process so far.
std::uint64_t heap_allocation_count();

// Counts allocations between construction and count().
class AllocationCounter {
 public:
  AllocationCounter() : start_(heap_allocation_count()) {}
  std::uint64_t count() const { return heap_allocation_count() - start_; }
  void restart() { start_ = heap_allocation_count(); }

 private:
  std::uint64_t start_;
};

}  // namespace dyncp::core
