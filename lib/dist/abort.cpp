#include "dist/abort.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "dist/launch_env.hpp"

namespace dyncp::dist {

namespace {

struct AbortRegistry {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, std::function<void()>>> actions;
  std::size_t next_id = 1;
};

AbortRegistry& registry() {
  static AbortRegistry instance;
  return instance;
}

std::atomic<JobAbortFunction> job_abort_function{nullptr};
std::atomic<int> abort_rank{-1};
std::atomic<int> abort_world_size{0};
std::atomic<bool> abort_started{false};

std::pair<int, int> rank_for_messages() {
  if (abort_rank.load() >= 0) return {abort_rank.load(), abort_world_size.load()};
  try {
    const LaunchEnv env = discover_launch_env();
    return {env.rank, env.world_size};
  } catch (...) {
    return {0, 1};
  }
}

}  // namespace

void set_job_abort_function(JobAbortFunction function) {
  job_abort_function.store(function);
}

void set_abort_rank(int rank, int world_size) {
  abort_rank.store(rank);
  abort_world_size.store(world_size);
}

AbortActionRegistration::AbortActionRegistration(std::function<void()> action) {
  auto& reg = registry();
  const std::lock_guard lock(reg.mutex);
  id_ = reg.next_id++;
  reg.actions.emplace_back(id_, std::move(action));
}

AbortActionRegistration::~AbortActionRegistration() {
  auto& reg = registry();
  const std::lock_guard lock(reg.mutex);
  std::erase_if(reg.actions, [this](const auto& entry) { return entry.first == id_; });
}

void abort_job(const std::string& message, int exit_code) {
  if (abort_started.exchange(true)) {
    // Another thread is already taking the job down; it will end this process too.
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::_Exit(exit_code);
  }
  const auto [rank, world_size] = rank_for_messages();
  const std::string line = "rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                           " failed: " + message + " -- aborting the job";
  // Straight to stderr as well: the logger may be unset or filtered on this rank.
  std::fprintf(stderr, "[dyncp] %s\n", line.c_str());
  std::fflush(stderr);
  if (auto logger = spdlog::default_logger()) logger->flush();

  {
    // try_lock: the failing thread may hold the registry lock; aborting matters more.
    auto& reg = registry();
    std::unique_lock lock(reg.mutex, std::try_to_lock);
    if (lock.owns_lock()) {
      for (auto& entry : reg.actions) {
        try {
          entry.second();
        } catch (...) {  // an abort action failing must not stop the job abort
        }
      }
    }
  }
  if (const JobAbortFunction function = job_abort_function.load()) function(exit_code);
  std::_Exit(exit_code);
}

}  // namespace dyncp::dist
