#include "parallel/communication_thread.hpp"

#include <utility>

namespace dyncp::parallel {

CommunicationThread::CommunicationThread() : thread_([this] { run(); }) {}

CommunicationThread::~CommunicationThread() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::uint64_t CommunicationThread::post(std::function<void()> task) {
  std::uint64_t ticket = 0;
  {
    const std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
    ticket = ++posted_;
  }
  wake_.notify_all();
  return ticket;
}

void CommunicationThread::wait_until(std::uint64_t ticket) {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return finished_ >= ticket || failure_ != nullptr; });
  if (failure_) {
    // Reported once; the tasks it stopped count as run, so no later wait hangs on them.
    const std::exception_ptr failure = std::exchange(failure_, nullptr);
    std::rethrow_exception(failure);
  }
}

void CommunicationThread::wait_all() {
  std::uint64_t ticket = 0;
  {
    const std::lock_guard lock(mutex_);
    ticket = posted_;
  }
  wait_until(ticket);
}

std::uint64_t CommunicationThread::finished() const {
  const std::lock_guard lock(mutex_);
  return finished_;
}

void CommunicationThread::run() {
  std::unique_lock lock(mutex_);
  bool failed = false;
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    if (stop_) {  // shutting down: queued tasks are dropped
      ++finished_;
      continue;
    }
    lock.unlock();
    std::exception_ptr error;
    if (!failed) {
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    if (error) {
      failed = true;
      failure_ = error;
    }
    ++finished_;
    wake_.notify_all();
  }
}

}  // namespace dyncp::parallel
