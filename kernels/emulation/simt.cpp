#include "simt.hpp"

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_pipeline_primitives.h"
#include "device_heap.hpp"
#include "runtime_state.hpp"
#include "streams.hpp"

namespace dyncp::emulation {
namespace {

namespace ctx = boost::context;

constexpr std::size_t kStackBytes = 64 * 1024;
constexpr std::size_t kDefaultDynamicShared = 48 * 1024;
constexpr std::size_t kMaxDynamicShared = 227 * 1024;  // Hopper's opt-in limit per block
constexpr std::size_t kStacksPerSlab = 64;

// Stacks are reused from launch to launch (fibers are made per CUDA thread) and carved from
// contiguous slabs: switching between the lanes of a block then stays within a few pages.
class StackPool {
 public:
  ctx::stack_context allocate() {
    if (free_.empty()) {
      auto slab = std::make_unique<std::byte[]>(kStackBytes * kStacksPerSlab);
      for (std::size_t i = kStacksPerSlab; i-- > 0;) {
        ctx::stack_context stack;
        stack.sp = slab.get() + (i + 1) * kStackBytes;
        stack.size = kStackBytes;
        free_.push_back(stack);
      }
      slabs_.push_back(std::move(slab));
    }
    const ctx::stack_context stack = free_.back();
    free_.pop_back();
    return stack;
  }
  void deallocate(ctx::stack_context& stack) noexcept { free_.push_back(stack); }

 private:
  std::vector<std::unique_ptr<std::byte[]>> slabs_;
  std::vector<ctx::stack_context> free_;
};

// Borrowed from the pool by boost::context (its StackAllocator concept).
struct PooledStack {
  StackPool* pool;
  ctx::stack_context allocate() { return pool->allocate(); }
  void deallocate(ctx::stack_context& stack) noexcept { pool->deallocate(stack); }
};

enum class Wait : std::uint8_t { none, warp, block, done };

struct Lane {
  ThreadIndex index;
  ctx::fiber fiber;
  ctx::fiber scheduler;  // where the lane returns when it waits
  Wait wait = Wait::none;
  // Shuffle slots, alternated by shuffle parity: a lane writes the other slot next time, so
  // one barrier per shuffle suffices (nobody can be two shuffles ahead of a lane still reading).
  std::uint64_t exchange[2] = {0, 0};
  unsigned shuffles = 0;
  // Asynchronous copies (cuda_pipeline_primitives.h): queued with their commit batch.
  struct AsyncCopy {
    void* dst;
    const void* src;
    std::size_t bytes;
    std::size_t batch;
  };
  std::vector<AsyncCopy> copies;
  std::size_t committed = 0;  // batches committed so far
};

struct BlockRun {
  const char* kernel = "";
  std::vector<Lane>* lanes = nullptr;
  Lane* current = nullptr;
  unsigned char* dynamic_shared = nullptr;  // 128-byte aligned
};

BlockRun run;  // the one block executing now
StackPool stacks;
std::mutex max_shared_mutex;
std::map<const void*, int> max_dynamic_shared;  // kernel -> opted-in bytes

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "CUDA emulation: %s\n", message.c_str());
  std::abort();
}

void wait_here(Wait wait) {
  Lane& lane = *run.current;
  lane.wait = wait;
  lane.scheduler = std::move(lane.scheduler).resume();
}

std::string block_name(const dim3& b) {
  return "(" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
}

// Opens the barriers whose lanes have all arrived; false when nothing can run any more.
bool release_barriers(std::vector<Lane>& lanes, unsigned threads, const uint3& block) {
  bool any_waiting = false, any_released = false;
  bool all_at_block = true, any_at_block = false;
  for (unsigned warp = 0; warp * 32 < threads; ++warp) {
    const unsigned first = warp * 32, last = std::min(threads, first + 32);
    unsigned at_warp = 0, done = 0;
    for (unsigned t = first; t < last; ++t) {
      at_warp += lanes[t].wait == Wait::warp;
      done += lanes[t].wait == Wait::done;
    }
    if (at_warp > 0 && at_warp + done == last - first) {
      if (done > 0) {
        fail(std::string("kernel ") + run.kernel + " block " +
             block_name(dim3(block.x, block.y, block.z)) + ": warp " + std::to_string(warp) +
             " synchronises (shuffle or WMMA) after some of its lanes exited");
      }
      for (unsigned t = first; t < last; ++t) lanes[t].wait = Wait::none;
      any_released = true;
    }
  }
  for (unsigned t = 0; t < threads; ++t) {
    if (lanes[t].wait == Wait::done) continue;
    any_waiting = true;
    if (lanes[t].wait == Wait::block) {
      any_at_block = true;
    } else {
      all_at_block = false;
    }
  }
  if (any_at_block && all_at_block) {
    for (unsigned t = 0; t < threads; ++t)
      if (lanes[t].wait == Wait::block) lanes[t].wait = Wait::none;
    any_released = true;
  }
  if (any_waiting && !any_released) {
    unsigned at_block = 0, at_warp = 0, done = 0;
    for (unsigned t = 0; t < threads; ++t) {
      at_block += lanes[t].wait == Wait::block;
      at_warp += lanes[t].wait == Wait::warp;
      done += lanes[t].wait == Wait::done;
    }
    fail(std::string("kernel ") + run.kernel + " block " +
         block_name(dim3(block.x, block.y, block.z)) + " can never continue: " +
         std::to_string(at_block) + " threads wait at __syncthreads, " + std::to_string(at_warp) +
         " at a warp barrier, " + std::to_string(done) + " exited (a hang on a GPU)");
  }
  return any_waiting;
}

}  // namespace

const ThreadIndex& current_thread() {
  return run.current->index;
}

unsigned char* dynamic_shared_memory() {
  return run.dynamic_shared;
}

void sync_block() {
  wait_here(Wait::block);
}

void sync_warp() {
  wait_here(Wait::warp);
}

std::uint64_t exchange_in_warp(std::uint64_t bits, unsigned source_lane) {
  Lane& self = *run.current;
  const unsigned slot = self.shuffles++ % 2;
  self.exchange[slot] = bits;
  sync_warp();
  const unsigned base = self.index.thread_idx.x - self.index.thread_idx.x % 32;
  return (*run.lanes)[base + source_lane].exchange[slot];
}

void pipeline_memcpy_async(void* dst_shared, const void* src_global, std::size_t bytes) {
  if (bytes != 4 && bytes != 8 && bytes != 16) {
    fail(std::string("kernel ") + run.kernel + ": an asynchronous copy of " +
         std::to_string(bytes) + " bytes (4, 8 or 16 only)");
  }
  if (reinterpret_cast<std::uintptr_t>(dst_shared) % bytes != 0 ||
      reinterpret_cast<std::uintptr_t>(src_global) % bytes != 0) {
    fail(std::string("kernel ") + run.kernel + ": an asynchronous copy not aligned to its size");
  }
  Lane& lane = *run.current;
  lane.copies.push_back({dst_shared, src_global, bytes, lane.committed});
}

void pipeline_commit() {
  ++run.current->committed;
}

void pipeline_wait_prior(std::size_t prior) {
  Lane& lane = *run.current;
  const std::size_t landed = lane.committed > prior ? lane.committed - prior : 0;
  std::size_t kept = 0;
  for (const Lane::AsyncCopy& copy : lane.copies) {
    if (copy.batch < landed) {
      std::memcpy(copy.dst, copy.src, copy.bytes);
    } else {
      lane.copies[kept++] = copy;
    }
  }
  lane.copies.resize(kept);
}

cudaError_t set_max_dynamic_shared_memory(const void* kernel, int bytes) {
  if (bytes < 0 || static_cast<std::size_t>(bytes) > kMaxDynamicShared) {
    return record_error(cudaErrorInvalidValue);
  }
  std::lock_guard lock(max_shared_mutex);
  max_dynamic_shared[kernel] = bytes;
  return cudaSuccess;
}

void check_kernel_pointer(const char* name, int argument, const void* pointer) {
  if (pointer == nullptr || DeviceHeap::instance().in_range(pointer)) return;
  fail(std::string("kernel ") + name + " argument " + std::to_string(argument) + " is " +
       "a host pointer; kernels can only read device memory (cudaMalloc)");
}

namespace {
void execute_grid(const char* name, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
                  const std::function<void()>& body);
}  // namespace

cudaError_t run_grid(const void* kernel, const char* name, dim3 grid, dim3 block,
                     std::size_t dynamic_shared_bytes, cudaStream_t stream,
                     std::function<void()> body) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535) {
    return record_error(cudaErrorInvalidConfiguration);
  }
  std::size_t shared_limit = kDefaultDynamicShared;
  {
    std::lock_guard lock(max_shared_mutex);
    if (auto it = max_dynamic_shared.find(kernel); it != max_dynamic_shared.end())
      shared_limit = static_cast<std::size_t>(it->second);
  }
  if (dynamic_shared_bytes > shared_limit) {
    // What the hardware does: the launch fails; cudaGetLastError reports it.
    return record_error(cudaErrorInvalidValue);
  }
  if (!stream_is_valid(stream)) return record_error(cudaErrorInvalidResourceHandle);
  note_launch(name);
  submit(stream, [name, grid, block, dynamic_shared_bytes, body = std::move(body)] {
    execute_grid(name, grid, block, dynamic_shared_bytes, body);
  });
  return cudaSuccess;
}

namespace {

void execute_grid(const char* name, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
                  const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  DeviceAccess access;
  std::vector<unsigned char> shared(dynamic_shared_bytes + 128);
  std::vector<Lane> lanes(threads);
  run.kernel = name;
  run.lanes = &lanes;
  run.dynamic_shared =
      shared.data() + (128 - reinterpret_cast<std::uintptr_t>(shared.data()) % 128) % 128;
  std::exception_ptr failure;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        std::fill(shared.begin(), shared.end(), 0xff);
        for (unsigned t = 0; t < threads; ++t) {
          Lane& lane = lanes[t];
          lane.index = {{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)},
                        {x, y, z},
                        block,
                        grid};
          lane.wait = Wait::none;
          lane.shuffles = 0;
          lane.copies.clear();
          lane.committed = 0;
          lane.fiber = ctx::fiber(std::allocator_arg, PooledStack{&stacks},
                                  [&lane, &body, &failure](ctx::fiber&& scheduler) {
                                    lane.scheduler = std::move(scheduler);
                                    try {
                                      body();
                                    } catch (...) {
                                      if (!failure) failure = std::current_exception();
                                    }
                                    lane.wait = Wait::done;
                                    return std::move(lane.scheduler);
                                  });
        }
        do {
          for (unsigned t = 0; t < threads; ++t) {
            Lane& lane = lanes[t];
            if (lane.wait != Wait::none) continue;
            run.current = &lane;
            lane.fiber = std::move(lane.fiber).resume();
          }
        } while (release_barriers(lanes, threads, {x, y, z}));
        run.current = nullptr;
        if (failure) std::rethrow_exception(failure);
      }
    }
  }
  run.lanes = nullptr;
  run.dynamic_shared = nullptr;
}

}  // namespace

}  // namespace dyncp::emulation
