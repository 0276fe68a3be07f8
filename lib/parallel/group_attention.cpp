#include "parallel/group_attention.hpp"

#include <string>

#include "core/error.hpp"
#include "parallel/cp_attention.hpp"
#include "parallel/cp_ring_attention.hpp"

namespace dyncp::parallel {

std::unique_ptr<GroupAttentionContext> make_cp_attention_context(config::CpCommType type,
                                                                 SeamCounters* counters) {
  switch (type) {
    case config::CpCommType::all_gather:
      return std::make_unique<CpAttentionContext>(counters);
    case config::CpCommType::p2p:
      return std::make_unique<CpRingAttentionContext>(counters);
    case config::CpCommType::a2a:
    case config::CpCommType::a2a_p2p:
      break;
  }
  core::throw_runtime_error("CP attention: model.cp_comm_type " +
                            std::string(config::to_string(type)) +
                            " is not implemented (validation should have rejected it)");
}

}  // namespace dyncp::parallel
