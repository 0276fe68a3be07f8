#include "device_heap.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

namespace dyncp::emulation {
namespace {

constexpr std::size_t kAlignment = 256;
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

struct sigaction previous_segv_action {};

// Async-signal-safe report of a host access to device memory, then abort.
void on_segv(int signal, siginfo_t* info, void* context) {
  DeviceHeap& heap = DeviceHeap::instance();
  if (info != nullptr && heap.in_range(info->si_addr) && !heap.is_open()) {
    char message[320];
    std::uintptr_t base = 0;
    std::size_t size = 0;
    const bool live = heap.find(info->si_addr, base, size);
    const int length =
        live ? std::snprintf(
                   message, sizeof message,
                   "CUDA emulation: host code touched device memory at %p (byte %zu of "
                   "a %zu-byte device allocation): copy it to the host with "
                   "cudaMemcpy first\n",
                   info->si_addr,
                   static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(info->si_addr) - base),
                   size)
             : std::snprintf(message, sizeof message,
                             "CUDA emulation: host code touched freed or unallocated device "
                             "memory at %p\n",
                             info->si_addr);
    if (length > 0) {
      [[maybe_unused]] const auto written =
          write(STDERR_FILENO, message, static_cast<std::size_t>(length));
    }
    std::abort();
  }
  // Not ours: behave as without the handler.
  if (previous_segv_action.sa_flags & SA_SIGINFO) {
    if (previous_segv_action.sa_sigaction != nullptr) {
      previous_segv_action.sa_sigaction(signal, info, context);
      return;
    }
  } else if (previous_segv_action.sa_handler != SIG_DFL &&
             previous_segv_action.sa_handler != SIG_IGN) {
    previous_segv_action.sa_handler(signal);
    return;
  }
  ::signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

std::size_t configured_capacity() {
  std::size_t mib = 16384;
  if (const char* value = std::getenv("DYNCP_EMULATED_GPU_MEMORY_MIB"); value && *value) {
    mib = std::strtoull(value, nullptr, 10);
  }
  return mib << 20;
}

}  // namespace

DeviceHeap& DeviceHeap::instance() {
  // Never destroyed: device buffers owned by other statics are freed during exit.
  static DeviceHeap* heap = new DeviceHeap;
  return *heap;
}

DeviceHeap::DeviceHeap() : capacity_(configured_capacity()) {
  reserved_ = round_up(capacity_, kPage);
  void* range =
      mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) {
    std::fprintf(stderr, "CUDA emulation: cannot reserve %zu bytes of address space\n", reserved_);
    std::abort();
  }
  base_ = static_cast<std::byte*>(range);
  struct sigaction action {};
  action.sa_sigaction = on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous_segv_action);
}

void* DeviceHeap::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes, kAlignment);
  std::size_t offset = top_;
  auto fit = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= size && (fit == free_.end() || it->second < fit->second)) fit = it;
  }
  if (fit != free_.end()) {
    offset = fit->first;
    const std::size_t rest = fit->second - size;
    free_.erase(fit);
    if (rest > 0) free_.emplace(offset + size, rest);
  } else {
    if (top_ + size > capacity_) return nullptr;
    top_ += size;
  }
  live_.emplace(offset, Allocation{size, bytes});
  const std::size_t needed = round_up(top_, kPage);
  if (needed > protected_) {
    // New pages start inaccessible unless a launch or copy has the heap open right now.
    if (open_depth_ > 0) mprotect(base_ + protected_, needed - protected_, PROT_READ | PROT_WRITE);
    protected_ = needed;
  }
  return base_ + offset;
}

bool DeviceHeap::release(void* pointer) {
  std::lock_guard lock(mutex_);
  const auto offset = static_cast<std::size_t>(static_cast<std::byte*>(pointer) - base_);
  if (!in_range(pointer)) return false;
  const auto it = live_.find(offset);
  if (it == live_.end()) return false;
  std::size_t begin = it->first, size = it->second.reserved;
  live_.erase(it);
  // Coalesce with the neighbours so long runs do not fragment the range.
  auto next = free_.lower_bound(begin);
  if (next != free_.end() && next->first == begin + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == begin) {
      begin = previous->first;
      size += previous->second;
      free_.erase(previous);
    }
  }
  if (begin + size == top_) {
    top_ = begin;
  } else {
    free_.emplace(begin, size);
  }
  return true;
}

bool DeviceHeap::in_range(const void* pointer) const {
  const auto* p = static_cast<const std::byte*>(pointer);
  return p >= base_ && p < base_ + reserved_;
}

bool DeviceHeap::find(const void* pointer, std::uintptr_t& base, std::size_t& size) const {
  if (!in_range(pointer)) return false;
  const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(pointer) - base_);
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return false;
  --it;
  if (offset >= it->first + it->second.reserved) return false;
  base = reinterpret_cast<std::uintptr_t>(base_ + it->first);
  size = it->second.requested;
  return true;
}

bool DeviceHeap::covers(const void* pointer, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  std::uintptr_t base = 0;
  std::size_t size = 0;
  if (!find(pointer, base, size)) return false;
  return reinterpret_cast<std::uintptr_t>(pointer) + bytes <= base + size;
}

std::size_t DeviceHeap::used_bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t used = 0;
  for (const auto& [offset, allocation] : live_) used += allocation.reserved;
  return used;
}

void DeviceHeap::protect(int protection) {
  if (protected_ > 0 && mprotect(base_, protected_, protection) != 0) {
    std::perror("CUDA emulation: mprotect");
    std::abort();
  }
}

void DeviceHeap::open() {
  if (open_depth_++ == 0) protect(PROT_READ | PROT_WRITE);
}

void DeviceHeap::close() {
  if (--open_depth_ == 0) protect(PROT_NONE);
}

}  // namespace dyncp::emulation
