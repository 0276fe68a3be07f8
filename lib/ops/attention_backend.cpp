#include "ops/attention_backend.hpp"

#include <atomic>

namespace dyncp::ops {
namespace {

std::atomic<const FusedAttention*> installed{nullptr};
std::atomic<bool> selected{false};
std::string& absence() {
  static std::string why;
  return why;
}

}  // namespace

void install_fused_attention(const FusedAttention* fused) {
  installed.store(fused);
}

const FusedAttention* installed_fused_attention() {
  return installed.load();
}

void set_fused_attention_absence(const std::string& why) {
  absence() = why;
}

std::string fused_attention_absence() {
  return absence();
}

void select_fused_attention(bool on) {
  selected.store(on);
}

bool fused_attention_selected() {
  return selected.load();
}

}  // namespace dyncp::ops
