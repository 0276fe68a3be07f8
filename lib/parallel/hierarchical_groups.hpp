#pragma once
// The two levels of `cp_comm_type: a2a+p2p` on a runtime CP group of c ranks: all-to-all groups
// of a = min(c, inner) consecutive group ranks (inside a node when the group is laid out node
// by node) and rings over the c / a ranks with the same index inside their all-to-all group.
//   Example, c = 8, inner = 2: all-to-all groups {0,1} {2,3} {4,5} {6,7}; rings {0,2,4,6} and
//   {1,3,5,7}. With c <= inner the all-to-all group is the runtime group and there is no ring.
// Subcommunicators are split from the runtime group the first time a group is used (collective
// over it; the step runs every rank of a group through the same bins) and kept for the run.

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/comm.hpp"

namespace dyncp::parallel {

class HierarchicalGroups {
 public:
  struct Levels {
    dist::Comm* all_to_all = nullptr;  // size min(c, inner)
    dist::Comm* ring = nullptr;        // size c / min(c, inner); nullptr when that is 1
  };

  // inner <= 0: the whole group is the all-to-all group (plain a2a).
  Levels levels(dist::Comm& group, int inner);

  // What the subcommunicators split here have moved so far (they are not the parallel
  // state's, so the step adds them to its own count).
  dist::CommCounters counters() const;

 private:
  struct Entry {
    dist::Comm* group = nullptr;
    int inner = 0;
    std::unique_ptr<dist::Comm> all_to_all, ring;
  };
  std::vector<Entry> entries_;
};

}  // namespace dyncp::parallel
