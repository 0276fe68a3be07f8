#include "parallel/hierarchical_groups.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

HierarchicalGroups::Levels HierarchicalGroups::levels(dist::Comm& group, int inner) {
  const int size = group.size();
  if (inner <= 0 || inner >= size) return {&group, nullptr};
  if (size % inner != 0) {
    core::throw_runtime_error("a2a+p2p: the inner size " + std::to_string(inner) +
                              " does not divide the CP group '" + group.name() + "' of " +
                              std::to_string(size) + " ranks");
  }
  for (const Entry& entry : entries_)
    if (entry.group == &group && entry.inner == inner)
      return {entry.all_to_all.get(), entry.ring.get()};
  Entry entry;
  entry.group = &group;
  entry.inner = inner;
  const int rank = group.rank();
  entry.all_to_all = group.split(rank / inner, rank, group.name() + "_a2a");
  entry.ring = group.split(rank % inner, rank, group.name() + "_ring");
  entries_.push_back(std::move(entry));
  return {entries_.back().all_to_all.get(), entries_.back().ring.get()};
}

dist::CommCounters HierarchicalGroups::counters() const {
  dist::CommCounters total;
  for (const Entry& entry : entries_) {
    for (const dist::Comm* comm : {entry.all_to_all.get(), entry.ring.get()})
      if (comm != nullptr) total += comm->counters();
  }
  return total;
}

}  // namespace dyncp::parallel
