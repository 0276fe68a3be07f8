#pragma once
// Collectives never wait forever. Every Comm call arms a slot here for its duration; a
// background thread looks at the armed slots and, when one has been waiting longer than the
// timeout, calls the expiry handler (by default abort_job, which names this rank and the
// stuck operation and takes the whole job down). A peer that died or never reached the
// matching call therefore turns into a prompt, explained abort instead of a hang.
//
// Arming is a mutex and a steady_clock read; no allocation after construction.
//
// Naming the culprit: the rank that times out knows only that it is waiting. With peer hooks
// (MpiRuntime installs them) every watchdog thread also answers status queries from other
// ranks, and the expiring rank asks every rank what it is doing before it aborts, so the abort
// message names the rank that is not in the collective (busy or stuck elsewhere) or does not
// answer at all (stopped or dead).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dyncp::dist {

class CollectiveWatchdog {
 public:
  using ExpiryHandler = std::function<void(const std::string& message)>;

  // timeout_seconds <= 0 disables the watchdog (slots are still tracked, never expire).
  explicit CollectiveWatchdog(double timeout_seconds, ExpiryHandler on_expiry = {});
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  double timeout_seconds() const { return timeout_seconds_; }

  // Hooks for naming the culprit, called on the watchdog thread without its lock held:
  // `answer_queries` every poll period, `describe_peers` on an expiry (its text is appended to
  // the abort message). Set before any collective runs.
  struct PeerHooks {
    std::function<void()> answer_queries;
    std::function<std::string()> describe_peers;
  };
  void set_peer_hooks(PeerHooks hooks);

  // What this rank is doing, for a peer's query: "in barrier on 'world' for 3.1 s" or
  // "in no collective".
  std::string describe_self() const;

  // RAII: armed from construction to destruction. `operation` and `comm_name` must outlive it.
  class Guard {
   public:
    Guard(CollectiveWatchdog* watchdog, std::string_view operation, std::string_view comm_name,
          int comm_rank, int comm_size);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    CollectiveWatchdog* watchdog_;
    std::size_t slot_;
  };

  // Number of expiries seen (the handler normally does not return; tests install one that does).
  int expiries() const;

 private:
  struct Slot {
    bool armed = false;
    bool reported = false;
    std::chrono::steady_clock::time_point start;
    std::string_view operation;
    std::string_view comm_name;
    int comm_rank = 0;
    int comm_size = 0;
  };

  std::size_t arm(std::string_view operation, std::string_view comm_name, int comm_rank,
                  int comm_size);
  void disarm(std::size_t slot);
  void run();

  double timeout_seconds_;
  ExpiryHandler on_expiry_;
  PeerHooks peer_hooks_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Slot> slots_;
  bool stopping_ = false;
  int expiries_ = 0;
  std::thread thread_;
};

}  // namespace dyncp::dist
