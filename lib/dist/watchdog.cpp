#include "dist/watchdog.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "dist/abort.hpp"

namespace dyncp::dist {

namespace {
// Enough for nested calls on a few threads; arming more at once is a bug.
constexpr std::size_t max_armed_calls = 64;
}  // namespace

CollectiveWatchdog::CollectiveWatchdog(double timeout_seconds, ExpiryHandler on_expiry)
    : timeout_seconds_(timeout_seconds), on_expiry_(std::move(on_expiry)), slots_(max_armed_calls) {
  if (!on_expiry_) {
    on_expiry_ = [](const std::string& message) { abort_job(message); };
  }
  if (timeout_seconds_ > 0) thread_ = std::thread([this] { run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::set_peer_hooks(PeerHooks hooks) {
  const std::lock_guard lock(mutex_);
  peer_hooks_ = std::move(hooks);
}

std::string CollectiveWatchdog::describe_self() const {
  const std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  for (const auto& slot : slots_) {
    if (!slot.armed) continue;
    return fmt::format("in {} on '{}' for {:.1f} s", slot.operation, slot.comm_name,
                       std::chrono::duration<double>(now - slot.start).count());
  }
  return "in no collective (computing, or stuck outside the communicator)";
}

int CollectiveWatchdog::expiries() const {
  const std::lock_guard lock(mutex_);
  return expiries_;
}

std::size_t CollectiveWatchdog::arm(std::string_view operation, std::string_view comm_name,
                                    int comm_rank, int comm_size) {
  const std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].armed) continue;
    slots_[i] = Slot{true,      false,    std::chrono::steady_clock::now(), operation, comm_name,
                     comm_rank, comm_size};
    return i;
  }
  core::throw_runtime_error("more than 64 communicator calls in flight at once (internal limit)");
}

void CollectiveWatchdog::disarm(std::size_t slot) {
  const std::lock_guard lock(mutex_);
  slots_[slot].armed = false;
}

void CollectiveWatchdog::run() {
  using namespace std::chrono;
  const auto timeout = duration_cast<steady_clock::duration>(duration<double>(timeout_seconds_));
  // Poll often enough that an expiry is noticed within a tenth of the timeout (at most 1 s).
  const auto period =
      std::clamp<steady_clock::duration>(timeout / 10, milliseconds(10), seconds(1));
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period);
    if (stopping_) break;
    if (peer_hooks_.answer_queries) {
      const auto answer = peer_hooks_.answer_queries;
      lock.unlock();
      answer();
      lock.lock();
    }
    const auto now = steady_clock::now();
    for (auto& slot : slots_) {
      if (!slot.armed || slot.reported || now - slot.start < timeout) continue;
      slot.reported = true;
      ++expiries_;
      const double waited = duration<double>(now - slot.start).count();
      const std::string message = fmt::format(
          "{} on communicator '{}' (rank {} of {}) did not complete within {:g} s (waited "
          "{:.1f} s): another rank has failed, hung or called a different collective",
          slot.operation, slot.comm_name, slot.comm_rank, slot.comm_size, timeout_seconds_, waited);
      const auto describe_peers = peer_hooks_.describe_peers;
      lock.unlock();
      on_expiry_(describe_peers ? message + describe_peers() : message);
      lock.lock();
      break;  // slots may have changed while unlocked; look again next period
    }
  }
}

CollectiveWatchdog::Guard::Guard(CollectiveWatchdog* watchdog, std::string_view operation,
                                 std::string_view comm_name, int comm_rank, int comm_size)
    : watchdog_(watchdog), slot_(0) {
  if (watchdog_ != nullptr) slot_ = watchdog_->arm(operation, comm_name, comm_rank, comm_size);
}

CollectiveWatchdog::Guard::~Guard() {
  if (watchdog_ != nullptr) watchdog_->disarm(slot_);
}

}  // namespace dyncp::dist
