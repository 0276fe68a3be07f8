#include "dist/watchdog.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using dyncp::dist::CollectiveWatchdog;

namespace {
struct Recorder {
  std::mutex mutex;
  std::vector<std::string> messages;
  CollectiveWatchdog::ExpiryHandler handler() {
    return [this](const std::string& message) {
      const std::lock_guard lock(mutex);
      messages.push_back(message);
    };
  }
};
}  // namespace

TEST_CASE("watchdog: a call that outlives the timeout is reported once, naming it",
          "[dist][watchdog]") {
  Recorder recorder;
  CollectiveWatchdog watchdog(0.05, recorder.handler());
  {
    const CollectiveWatchdog::Guard guard(&watchdog, "all_reduce", "dynamic_cp4", 2, 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  REQUIRE(watchdog.expiries() == 1);
  const std::lock_guard lock(recorder.mutex);
  REQUIRE(recorder.messages.size() == 1);
  CHECK_THAT(recorder.messages[0], Catch::Contains("all_reduce on communicator 'dynamic_cp4' "
                                                   "(rank 2 of 4) did not complete within 0.05 s"));
}

TEST_CASE("watchdog: calls that finish in time are never reported", "[dist][watchdog]") {
  Recorder recorder;
  CollectiveWatchdog watchdog(0.2, recorder.handler());
  for (int i = 0; i < 20; ++i) {
    const CollectiveWatchdog::Guard guard(&watchdog, "barrier", "world", 0, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(watchdog.expiries() == 0);
}

TEST_CASE("watchdog: a disabled watchdog never fires", "[dist][watchdog]") {
  Recorder recorder;
  CollectiveWatchdog watchdog(0.0, recorder.handler());
  {
    const CollectiveWatchdog::Guard guard(&watchdog, "barrier", "world", 0, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(watchdog.expiries() == 0);
}
