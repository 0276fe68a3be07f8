// The emulated CUDA runtime API. Work runs when it is enqueued, in stream order, or in one of
// the deferred orders of streams.hpp; what the host can observe of a stream is made as late as
// the hardware allows: an asynchronous copy to host memory lands only when the host
// synchronises with its stream (stream, event or device synchronisation), so code that reads
// the destination before synchronising sees stale bytes here as it may on a GPU.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_runtime_api.h"
#include "device_heap.hpp"
#include "emulation_counters.h"
#include "runtime_state.hpp"
#include "streams.hpp"

namespace dyncp::emulation {
namespace {

std::mutex state_mutex;
thread_local cudaError_t last_error = cudaSuccess;
thread_local std::string last_detail;
thread_local cudaError_t last_detail_error = cudaSuccess;
CUstream_st default_stream;
std::set<cudaStream_t> streams;
std::vector<CUstream_st*> stream_list{&default_stream};  // creation order
int streams_created = 0;
std::set<cudaEvent_t> events;
std::set<void*> pinned;
int current_device = 0;
unsigned long long launches = 0;
RuntimeCounters counters;  // device-to-host traffic
std::map<std::string, unsigned long long, std::less<>> launches_by_name;

int device_count() {
  if (const char* value = std::getenv("DYNCP_EMULATED_GPUS"); value && *value) {
    return std::atoi(value);
  }
  return 8;
}

CUstream_st& resolve(cudaStream_t stream) {
  return stream == nullptr ? default_stream : *stream;
}

void deliver(CUstream_st& stream, std::uint64_t up_to) {
  auto& pending = stream.pending;
  std::size_t kept = 0;
  for (auto& copy : pending) {
    if (copy.sequence <= up_to) {
      std::memcpy(copy.destination, copy.bytes.data(), copy.bytes.size());
    } else {
      pending[kept++] = std::move(copy);
    }
  }
  pending.resize(kept);
}

void deliver_all(CUstream_st& stream) {
  deliver(stream, stream.enqueued);
}

std::string hex(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", pointer);
  return text;
}

// Checks one side of a copy: device sides must lie inside one allocation, host sides outside
// the device range.
bool check_side(const void* pointer, std::size_t bytes, bool device, const char* call,
                const char* side) {
  DeviceHeap& heap = DeviceHeap::instance();
  if (device ? heap.covers(pointer, bytes) : !heap.in_range(pointer)) return true;
  record_error(cudaErrorInvalidValue, std::string(call) + ": " + side + " " + hex(pointer) + " (" +
                                          std::to_string(bytes) + " bytes) is " +
                                          (device ? "not inside one device allocation"
                                                  : "device memory, not host memory"));
  return false;
}

// Which sides of a copy are device memory: from the kind, or for cudaMemcpyDefault from where
// the pointers lie (unified addressing, as on a GPU).
struct CopySides {
  bool dst_device, src_device;
};
CopySides copy_sides(const void* dst, const void* src, cudaMemcpyKind kind) {
  if (kind == cudaMemcpyDefault) {
    const DeviceHeap& heap = DeviceHeap::instance();
    return {heap.in_range(dst), heap.in_range(src)};
  }
  return {kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice,
          kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice};
}

cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                 cudaStream_t stream, bool asynchronous, const char* call) {
  if (bytes == 0) return cudaSuccess;
  const auto [dst_device, src_device] = copy_sides(dst, src, kind);
  if (!check_side(dst, bytes, dst_device, call, "destination") ||
      !check_side(src, bytes, src_device, call, "source")) {
    return cudaErrorInvalidValue;
  }
  if (!stream_is_valid(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (src_device && !dst_device) {
    std::lock_guard lock(state_mutex);
    ++counters.device_to_host_copies;
    counters.device_to_host_bytes += bytes;
  }
  if (deferred_order()) {
    // A host source is read now (staged, as pageable memory is); device memory when it runs.
    std::vector<unsigned char> staged;
    if (!src_device)
      staged.assign(static_cast<const unsigned char*>(src),
                    static_cast<const unsigned char*>(src) + bytes);
    const std::uint64_t sequence = submit(stream, [dst, src, bytes, staged = std::move(staged)] {
      DeviceAccess access;
      std::memmove(dst, staged.empty() ? src : staged.data(), bytes);
    });
    if (!asynchronous) drain(stream, sequence);
    return cudaSuccess;
  }
  submit(stream, nullptr);
  std::lock_guard lock(state_mutex);
  CUstream_st& s = resolve(stream);
  DeviceAccess access;
  if (asynchronous && !dst_device) {
    CUstream_st::PendingCopy pending{s.enqueued, dst, std::vector<unsigned char>(bytes)};
    std::memcpy(pending.bytes.data(), src, bytes);
    s.pending.push_back(std::move(pending));
    return cudaSuccess;
  }
  std::memmove(dst, src, bytes);
  if (!asynchronous) deliver_all(s);  // a synchronous copy waits for the stream
  return cudaSuccess;
}

cudaError_t set(void* dst, std::size_t pitch, int value, std::size_t width, std::size_t height,
                cudaStream_t stream, const char* call, bool synchronous) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (!check_side(dst, pitch * (height - 1) + width, true, call, "destination")) {
    return cudaErrorInvalidValue;
  }
  if (!stream_is_valid(stream)) return record_error(cudaErrorInvalidResourceHandle);
  const std::uint64_t sequence = submit(stream, [=] {
    DeviceAccess access;
    for (std::size_t row = 0; row < height; ++row) {
      std::memset(static_cast<unsigned char*>(dst) + row * pitch, value, width);
    }
  });
  if (synchronous) drain(stream, sequence);
  return cudaSuccess;
}

}  // namespace

cudaError_t record_error(cudaError_t error, std::string detail) {
  last_error = error;
  last_detail_error = error;
  last_detail = std::move(detail);
  return error;
}

bool stream_is_valid(cudaStream_t stream) {
  if (stream == nullptr) return true;
  std::lock_guard lock(state_mutex);
  return streams.count(stream) != 0;
}

void note_launch(const char* name) {
  std::lock_guard lock(state_mutex);
  ++launches;
  ++launches_by_name[name];
}

CUstream_st& resolve_stream(cudaStream_t stream) {
  return resolve(stream);
}

int stream_index(CUstream_st* stream) {
  return resolve(stream).index;
}

std::vector<CUstream_st*> all_streams() {
  std::lock_guard lock(state_mutex);
  return stream_list;
}

unsigned long long launch_count() {
  std::lock_guard lock(state_mutex);
  return launches;
}

RuntimeCounters runtime_counters() {
  std::lock_guard lock(state_mutex);
  RuntimeCounters out = counters;
  out.launches = launches;
  return out;
}

unsigned long long launches_named(std::string_view prefix) {
  std::lock_guard lock(state_mutex);
  unsigned long long total = 0;
  for (auto it = launches_by_name.lower_bound(prefix);
       it != launches_by_name.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    total += it->second;
  return total;
}

}  // namespace dyncp::emulation

using namespace dyncp::emulation;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : record_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return record_error(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return record_error(cudaErrorInvalidDevice);
  *prop = {};
  std::snprintf(prop->name, sizeof prop->name, "dyncp emulated GPU (host SIMT, sm_90 rules)");
  prop->totalGlobalMem = DeviceHeap::instance().total_bytes();
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->multiProcessorCount = 1;
  prop->major = 9;
  prop->minor = 0;
  prop->maxThreadsPerBlock = 1024;
  prop->warpSize = 32;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  drain_all();
  std::lock_guard lock(state_mutex);
  deliver_all(default_stream);
  for (cudaStream_t stream : streams) deliver_all(*stream);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  DeviceHeap& heap = DeviceHeap::instance();
  *total_bytes = heap.total_bytes();
  *free_bytes = heap.total_bytes() - heap.used_bytes();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  *pointer = DeviceHeap::instance().allocate(bytes);
  if (*pointer == nullptr) {
    return record_error(
        cudaErrorMemoryAllocation,
        "cudaMalloc: " + std::to_string(bytes) +
            " bytes do not fit the emulated device (DYNCP_EMULATED_GPU_MEMORY_MIB)");
  }
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  drain_all();  // cudaFree waits for the device, as on a GPU
  if (!DeviceHeap::instance().release(pointer)) {
    return record_error(cudaErrorInvalidDevicePointer,
                        "cudaFree: " + hex(pointer) + " is not a live device allocation");
  }
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, std::size_t bytes) {
  *pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (*pointer == nullptr) return record_error(cudaErrorMemoryAllocation);
  std::lock_guard lock(state_mutex);
  pinned.insert(*pointer);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  *attributes = {};
  if (DeviceHeap::instance().in_range(pointer)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = current_device;
    attributes->devicePointer = const_cast<void*>(pointer);
    return cudaSuccess;
  }
  std::lock_guard lock(state_mutex);
  if (pinned.count(const_cast<void*>(pointer)) != 0) {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(pointer);
  }
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* pointer) {
  std::lock_guard lock(state_mutex);
  if (pinned.erase(pointer) == 0) return record_error(cudaErrorInvalidValue);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, false, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, true, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy2D(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t height, cudaMemcpyKind kind) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dst_pitch || width > src_pitch) return record_error(cudaErrorInvalidPitchValue);
  // Each side must lie inside one allocation over its whole extent, as on a GPU.
  const auto [dst_device, src_device] = copy_sides(dst, src, kind);
  if (!check_side(dst, dst_pitch * (height - 1) + width, dst_device, "cudaMemcpy2D",
                  "destination") ||
      !check_side(src, src_pitch * (height - 1) + width, src_device, "cudaMemcpy2D", "source")) {
    return cudaErrorInvalidValue;
  }
  if (src_device && !dst_device) {
    std::lock_guard lock(state_mutex);
    ++counters.device_to_host_copies;
    counters.device_to_host_bytes += width * height;
  }
  const std::uint64_t sequence = submit(nullptr, [=] {
    DeviceAccess access;
    for (std::size_t row = 0; row < height; ++row) {
      std::memmove(static_cast<unsigned char*>(dst) + row * dst_pitch,
                   static_cast<const unsigned char*>(src) + row * src_pitch, width);
    }
  });
  drain(nullptr, sequence);  // synchronous: the host waits for the default stream
  std::lock_guard lock(state_mutex);
  deliver_all(resolve(nullptr));
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  return set(dst, bytes, value, bytes, 1, nullptr, "cudaMemset", true);
}

cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  return set(dst, bytes, value, bytes, 1, stream, "cudaMemsetAsync", false);
}

cudaError_t cudaMemset2DAsync(void* dst, std::size_t pitch, int value, std::size_t width,
                              std::size_t height, cudaStream_t stream) {
  return set(dst, pitch, value, width, height, stream, "cudaMemset2DAsync", false);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  std::lock_guard lock(state_mutex);
  *stream = new CUstream_st;
  (*stream)->flags = flags;
  (*stream)->index = ++streams_created;
  streams.insert(*stream);
  stream_list.push_back(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream_is_valid(stream) || stream == nullptr)
    return record_error(cudaErrorInvalidResourceHandle);
  drain_all();  // its work, and any other stream's waits on it, run first
  std::lock_guard lock(state_mutex);
  streams.erase(stream);
  std::erase(stream_list, stream);
  deliver_all(*stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!stream_is_valid(stream)) return record_error(cudaErrorInvalidResourceHandle);
  drain(stream);
  std::lock_guard lock(state_mutex);
  deliver_all(resolve(stream));
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  // All work has run; a query that says so is a synchronisation point.
  return cudaStreamSynchronize(stream);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (!stream_is_valid(stream)) return record_error(cudaErrorInvalidResourceHandle);
  CUstream_st* producer = nullptr;
  std::uint64_t until = 0;
  {
    std::lock_guard lock(state_mutex);
    if (events.count(event) == 0) return record_error(cudaErrorInvalidResourceHandle);
    if (event->recorded) {  // waiting for an event never recorded waits for nothing
      producer = &resolve(event->stream);
      until = event->sequence;
    }
  }
  submit(stream, nullptr, producer, until);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  std::lock_guard lock(state_mutex);
  *event = new CUevent_st;
  (*event)->flags = flags;
  events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard lock(state_mutex);
  if (events.erase(event) == 0) return record_error(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!stream_is_valid(stream)) return record_error(cudaErrorInvalidResourceHandle);
  std::unique_lock lock(state_mutex);
  if (events.count(event) == 0) return record_error(cudaErrorInvalidResourceHandle);
  event->stream = stream;
  event->recorded = true;
  event->sequence = 0;
  lock.unlock();
  // The time is taken when the stream reaches the record, as on a GPU.
  const std::uint64_t sequence =
      submit(stream, [event] { event->time = std::chrono::steady_clock::now(); });
  lock.lock();
  event->sequence = sequence;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock lock(state_mutex);
  if (events.count(event) == 0) return record_error(cudaErrorInvalidResourceHandle);
  if (event->recorded && (event->stream == nullptr || streams.count(event->stream) != 0)) {
    const cudaStream_t stream = event->stream;
    const std::uint64_t sequence = event->sequence;
    lock.unlock();
    drain(stream, sequence);
    lock.lock();
    deliver(resolve(stream), sequence);
  }
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return cudaEventSynchronize(event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard lock(state_mutex);
  if (events.count(start) == 0 || events.count(end) == 0) {
    return record_error(cudaErrorInvalidResourceHandle);
  }
  if (!start->recorded || !end->recorded || (start->flags & cudaEventDisableTiming) ||
      (end->flags & cudaEventDisableTiming)) {
    return record_error(cudaErrorInvalidResourceHandle);
  }
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  return last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidPitchValue:
      return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  if (error == last_detail_error && !last_detail.empty()) return last_detail.c_str();
  return cudaGetErrorName(error);
}
