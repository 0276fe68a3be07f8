#pragma once
// Wall time and work spent inside the distributed seams, accumulated per step so the trainer
// can report where time goes (CP communication, EP communication) and tests can check that
// work really is divided among the ranks of a group.

#include <chrono>
#include <cstdint>

namespace dyncp::parallel {

struct SeamCounters {
  double cp_comm_ms = 0;
  double ep_comm_ms = 0;
  double tp_comm_ms = 0;  // the tensor-parallel group's sums and gathers
  // Causal (query, key) pairs this rank's attention evaluated, summed over layers and bins:
  // about 1/c of a bin's pairs on each rank of a group of c (zigzag balances them).
  std::int64_t attention_pairs = 0;
  std::int64_t attention_query_rows = 0;  // local query rows, summed over layers and bins
  std::int64_t expert_rows = 0;           // rows this rank's experts computed (after dispatch)
  // Expert exchanges whose rows travelled while other work ran beside them (the shared expert
  // under model.moe_shared_expert_overlap).
  std::int64_t exchanges_with_work_beside = 0;

  void reset() { *this = SeamCounters{}; }
};

// Adds the lifetime of the scope, in milliseconds, to `target`.
class ScopedMilliseconds {
 public:
  explicit ScopedMilliseconds(double& target)
      : target_(target), start_(std::chrono::steady_clock::now()) {}
  ~ScopedMilliseconds() {
    target_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
                   .count();
  }
  ScopedMilliseconds(const ScopedMilliseconds&) = delete;
  ScopedMilliseconds& operator=(const ScopedMilliseconds&) = delete;

 private:
  double& target_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dyncp::parallel
