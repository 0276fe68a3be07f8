// The order the emulated runtime runs stream work in (streams.hpp, emulation_counters.h).
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>

#include "emulation_counters.h"
#include "streams.hpp"

namespace dyncp::emulation {
namespace {

std::mutex scheduler_mutex;

struct Order {
  StreamOrder kind = StreamOrder::immediate;
  unsigned long long parameter = 0;  // the seed, or the delayed stream's index
  std::mt19937_64 random;
};

// DYNCP_EMULATED_STREAM_ORDER: immediate (default), random:SEED or delay:INDEX.
Order from_environment() {
  Order order;
  const char* value = std::getenv("DYNCP_EMULATED_STREAM_ORDER");
  if (value == nullptr || *value == '\0') return order;
  const std::string text(value);
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const unsigned long long parameter =
      colon == std::string::npos ? 0 : std::strtoull(text.c_str() + colon + 1, nullptr, 10);
  if (kind == "random") {
    order.kind = StreamOrder::random;
  } else if (kind == "delay") {
    order.kind = StreamOrder::delay_one;
  } else if (kind == "eager") {
    order.kind = StreamOrder::eager_one;
  } else if (kind != "immediate") {
    std::fprintf(stderr,
                 "CUDA emulation: DYNCP_EMULATED_STREAM_ORDER=%s: expected immediate, "
                 "random:SEED, delay:STREAM_INDEX or eager:STREAM_INDEX\n",
                 value);
    std::abort();
  }
  order.parameter = parameter;
  order.random.seed(parameter);
  return order;
}

Order& order() {
  static Order instance = from_environment();
  return instance;
}

bool runnable(const CUstream_st& s) {
  if (s.queue.empty()) return false;
  const CUstream_st::Work& head = s.queue.front();
  return head.waits_for == nullptr || head.waits_for->executed >= head.until;
}

// The stream to advance next, among those whose next operation may run.
CUstream_st* choose(const std::vector<CUstream_st*>& ready) {
  Order& o = order();
  if (o.kind == StreamOrder::random) return ready[o.random() % ready.size()];
  if (o.kind == StreamOrder::eager_one) {
    for (CUstream_st* s : ready)
      if (static_cast<unsigned long long>(s->index) == o.parameter) return s;
    return ready.front();  // the eager stream waits: the others go on
  }
  for (CUstream_st* s : ready)
    if (static_cast<unsigned long long>(s->index) != o.parameter) return s;
  return ready.front();  // only the delayed stream can go on
}

}  // namespace

bool deferred_order() {
  std::lock_guard lock(scheduler_mutex);
  return order().kind != StreamOrder::immediate;
}

void set_stream_order(StreamOrder kind, unsigned long long seed_or_stream) {
  drain_all();
  std::lock_guard lock(scheduler_mutex);
  order().kind = kind;
  order().parameter = seed_or_stream;
  order().random.seed(seed_or_stream);
}

StreamOrder stream_order(unsigned long long* parameter) {
  std::lock_guard lock(scheduler_mutex);
  if (parameter != nullptr) *parameter = order().parameter;
  return order().kind;
}

std::uint64_t submit(cudaStream_t stream, std::function<void()> run, CUstream_st* waits_for,
                     std::uint64_t until) {
  CUstream_st& s = resolve_stream(stream);
  std::unique_lock lock(scheduler_mutex);
  const std::uint64_t sequence = ++s.enqueued;
  if (order().kind == StreamOrder::immediate) {
    s.executed = sequence;
    lock.unlock();
    if (run) run();
    return sequence;
  }
  s.queue.push_back({sequence, waits_for, until, std::move(run)});
  return sequence;
}

void drain(cudaStream_t stream, std::uint64_t until) {
  CUstream_st& target = resolve_stream(stream);
  while (true) {
    CUstream_st* chosen = nullptr;
    CUstream_st::Work work{};
    {
      std::lock_guard lock(scheduler_mutex);
      const std::uint64_t goal = until == 0 ? target.enqueued : until;
      if (target.executed >= goal) return;
      std::vector<CUstream_st*> ready;
      for (CUstream_st* s : all_streams())
        if (runnable(*s)) ready.push_back(s);
      if (ready.empty()) {
        std::fprintf(stderr, "CUDA emulation: stream %d waits for work that can never run\n",
                     target.index);
        std::abort();
      }
      chosen = choose(ready);
      work = std::move(chosen->queue.front());
      chosen->queue.pop_front();
    }
    if (work.run) work.run();
    std::lock_guard lock(scheduler_mutex);
    chosen->executed = work.sequence;
  }
}

void drain_all() {
  for (CUstream_st* s : all_streams()) drain(s->index == 0 ? nullptr : s, 0);
}

}  // namespace dyncp::emulation
