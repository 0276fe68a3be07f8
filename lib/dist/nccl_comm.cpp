#include "dist/nccl_comm.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "dist/abort.hpp"
#include "dist/routed_comm.hpp"

#define DYNCP_CUDA_CHECK(call)                                                                   \
  do {                                                                                           \
    const cudaError_t dyncp_cuda_status = (call);                                                \
    if (dyncp_cuda_status != cudaSuccess) {                                                      \
      ::dyncp::core::throw_runtime_error(fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, \
                                                     #call,                                      \
                                                     cudaGetErrorString(dyncp_cuda_status)));    \
    }                                                                                            \
  } while (false)

#define DYNCP_NCCL_CHECK(call)                                                                   \
  do {                                                                                           \
    const ncclResult_t dyncp_nccl_status = (call);                                               \
    if (dyncp_nccl_status != ncclSuccess) {                                                      \
      ::dyncp::core::throw_runtime_error(fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, \
                                                     #call,                                      \
                                                     ncclGetErrorString(dyncp_nccl_status)));    \
    }                                                                                            \
  } while (false)

namespace dyncp::dist {

struct NcclComm::Handles {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr;  // recorded on the compute stream before each operation
  cudaEvent_t started_done = nullptr;  // recorded here for order_compute_after_started
  // Started transfers: the event recorded after each on the stream, by slot (grow-only), and
  // which transfer it was (its name, for the test-only dropped events).
  std::vector<cudaEvent_t> slot_events;
  std::vector<const char*> slot_transfers;
  std::vector<int> free_slots;
  std::int64_t* device_scratch = nullptr;  // barrier token and staged counts
  std::size_t device_scratch_elements = 0;
  std::unique_ptr<AbortActionRegistration> abort_registration;
};

namespace {

ncclDataType_t nccl_type(core::DType dtype) {
  switch (dtype) {
    case core::DType::f32:
      return ncclFloat32;
    case core::DType::f64:
      return ncclFloat64;
    case core::DType::bf16:
      return ncclBfloat16;
    case core::DType::i32:
      return ncclInt32;
    case core::DType::i64:
      return ncclInt64;
    case core::DType::u8:
      return ncclUint8;
  }
  return ncclUint8;
}

// Test-only builds (DYNCP_TEST_DROP_OVERLAP_EVENT, tests/parallel: layout_equivalence_drop_event)
// leave out events that order started transfers, so that the stream-order proof must catch
// them: DYNCP_TEST_DROPPED_EVENTS lists what is dropped (comma-separated): start_X (transfer X
// is not ordered after the compute stream's work, which produces its input) or after_X (the
// compute stream is not ordered after transfer X, whose output it reads), X one of all_reduce,
// reduce, broadcast, all_gather, all_to_all_v, send_recv. Unset: start_all_reduce. Normal
// builds drop nothing.
bool dropped_event([[maybe_unused]] std::string_view which) {
#ifdef DYNCP_TEST_DROP_OVERLAP_EVENT
  const char* list = std::getenv("DYNCP_TEST_DROPPED_EVENTS");
  const std::string_view names = list != nullptr ? list : "start_all_reduce";
  for (std::size_t at = 0; at <= names.size();) {
    const std::size_t comma = std::min(names.find(',', at), names.size());
    if (names.substr(at, comma - at) == which) return true;
    at = comma + 1;
  }
#endif
  return false;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? ncclSum : ncclMax;
}

const std::byte* at(const void* base, std::size_t elements, core::DType dtype) {
  return static_cast<const std::byte*>(base) + elements * core::dtype_size(dtype);
}
std::byte* at(void* base, std::size_t elements, core::DType dtype) {
  return static_cast<std::byte*>(base) + elements * core::dtype_size(dtype);
}

std::unique_ptr<NcclComm::Handles> make_handles(ncclComm_t comm, int device) {
  auto handles = std::make_unique<NcclComm::Handles>();
  handles->comm = comm;
  DYNCP_CUDA_CHECK(cudaSetDevice(device));
  DYNCP_CUDA_CHECK(cudaStreamCreateWithFlags(&handles->stream, cudaStreamNonBlocking));
  DYNCP_CUDA_CHECK(cudaEventCreateWithFlags(&handles->compute_done, cudaEventDisableTiming));
  DYNCP_CUDA_CHECK(cudaEventCreateWithFlags(&handles->started_done, cudaEventDisableTiming));
  ncclComm_t raw = comm;
  // On a job abort, unblock any kernel of this communicator before the processes die.
  handles->abort_registration =
      std::make_unique<AbortActionRegistration>([raw] { ncclCommAbort(raw); });
  return handles;
}

}  // namespace

std::unique_ptr<NcclComm> NcclComm::create(Comm& bootstrap, std::string name,
                                           const NcclCommOptions& options) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) DYNCP_NCCL_CHECK(ncclGetUniqueId(&id));
  bootstrap.broadcast(&id, sizeof id, core::DType::u8, 0);
  DYNCP_CUDA_CHECK(cudaSetDevice(options.device));
  ncclComm_t comm = nullptr;
  DYNCP_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  return std::make_unique<NcclComm>(bootstrap.rank(), bootstrap.size(), std::move(name),
                                    make_handles(comm, options.device), options);
}

NcclComm::NcclComm(int rank, int size, std::string name, std::unique_ptr<Handles> handles,
                   const NcclCommOptions& options)
    : Comm(rank, size, std::move(name), nullptr), handles_(std::move(handles)), options_(options) {}

NcclComm::~NcclComm() {
  handles_->abort_registration.reset();
  if (handles_->device_scratch != nullptr) cudaFree(handles_->device_scratch);
  for (cudaEvent_t event : handles_->slot_events) cudaEventDestroy(event);
  if (handles_->compute_done != nullptr) cudaEventDestroy(handles_->compute_done);
  if (handles_->started_done != nullptr) cudaEventDestroy(handles_->started_done);
  if (handles_->stream != nullptr) cudaStreamDestroy(handles_->stream);
  if (handles_->comm != nullptr) ncclCommDestroy(handles_->comm);
}

void NcclComm::abort_communicator() {
  handles_->abort_registration.reset();
  if (handles_->comm != nullptr) ncclCommAbort(handles_->comm);
  handles_->comm = nullptr;
}

void* NcclComm::stream_handle() const {
  return handles_->stream;
}

void NcclComm::check_async(const char* operation) {
  ncclResult_t async_status = ncclSuccess;
  DYNCP_NCCL_CHECK(ncclCommGetAsyncError(handles_->comm, &async_status));
  if (async_status != ncclSuccess && async_status != ncclInProgress) {
    abort_communicator();
    core::throw_runtime_error(fmt::format("{} on NCCL communicator '{}' (rank {} of {}): {}",
                                          operation, name(), rank(), size(),
                                          ncclGetErrorString(async_status)));
  }
}

void NcclComm::order_after_compute() {
  // The communicator's stream does not synchronise with the default stream by itself
  // (cudaStreamNonBlocking): make it wait for the kernels that produced the buffers.
  const auto compute = static_cast<cudaStream_t>(options_.compute_stream);
  DYNCP_CUDA_CHECK(cudaEventRecord(handles_->compute_done, compute));
  DYNCP_CUDA_CHECK(cudaStreamWaitEvent(handles_->stream, handles_->compute_done, 0));
}

void NcclComm::finish(const char* operation) {
  if (options_.synchronous) {
    synchronize();
  } else {
    check_async(operation);
  }
}

void NcclComm::synchronize() {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const cudaError_t status = cudaStreamQuery(handles_->stream);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) DYNCP_CUDA_CHECK(status);
    check_async("synchronize");
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options_.timeout_seconds > 0 && waited > options_.timeout_seconds) {
      abort_communicator();
      abort_job(
          fmt::format("NCCL communicator '{}' (rank {} of {}) did not finish its work "
                      "within {:g} s: another rank has failed, hung or called a different "
                      "collective",
                      name(), rank(), size(), options_.timeout_seconds));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclComm::do_all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype,
                             ReduceOp op) {
  order_after_compute();
  DYNCP_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), handles_->comm,
                                 handles_->stream));
  finish("all_reduce");
}

void NcclComm::do_all_gather(const void* send, std::size_t count, void* recv, core::DType dtype) {
  order_after_compute();
  DYNCP_NCCL_CHECK(
      ncclAllGather(send, recv, count, nccl_type(dtype), handles_->comm, handles_->stream));
  finish("all_gather");
}

void NcclComm::do_all_gather_v(const void* send, std::size_t send_count, void* recv,
                               std::span<const std::size_t> recv_counts, core::DType dtype) {
  order_after_compute();
  DYNCP_NCCL_CHECK(ncclGroupStart());
  std::size_t offset = 0;
  for (int peer = 0; peer < size(); ++peer) {
    const std::size_t count = recv_counts[static_cast<std::size_t>(peer)];
    if (peer == rank()) {
      if (count > 0) {
        DYNCP_CUDA_CHECK(cudaMemcpyAsync(at(recv, offset, dtype), send,
                                         count * core::dtype_size(dtype), cudaMemcpyDeviceToDevice,
                                         handles_->stream));
      }
    } else {
      if (send_count > 0) {
        DYNCP_NCCL_CHECK(
            ncclSend(send, send_count, nccl_type(dtype), peer, handles_->comm, handles_->stream));
      }
      if (count > 0) {
        DYNCP_NCCL_CHECK(ncclRecv(at(recv, offset, dtype), count, nccl_type(dtype), peer,
                                  handles_->comm, handles_->stream));
      }
    }
    offset += count;
  }
  DYNCP_NCCL_CHECK(ncclGroupEnd());
  finish("all_gather_v");
}

void NcclComm::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                 core::DType dtype, ReduceOp op) {
  order_after_compute();
  DYNCP_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op),
                                     handles_->comm, handles_->stream));
  finish("reduce_scatter");
}

void NcclComm::do_all_to_all(const void* send, void* recv, std::size_t count, core::DType dtype) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count);
  do_all_to_all_v(send, counts, recv, counts, dtype);
}

void NcclComm::do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                               void* recv, std::span<const std::size_t> recv_counts,
                               core::DType dtype) {
  order_after_compute();
  enqueue_all_to_all_v(send, send_counts, recv, recv_counts, dtype);
  finish("all_to_all_v");
}

void NcclComm::enqueue_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                    void* recv, std::span<const std::size_t> recv_counts,
                                    core::DType dtype) {
  DYNCP_NCCL_CHECK(ncclGroupStart());
  std::size_t send_offset = 0;
  std::size_t recv_offset = 0;
  for (int peer = 0; peer < size(); ++peer) {
    const auto index = static_cast<std::size_t>(peer);
    if (send_counts[index] > 0) {
      DYNCP_NCCL_CHECK(ncclSend(at(send, send_offset, dtype), send_counts[index], nccl_type(dtype),
                                peer, handles_->comm, handles_->stream));
    }
    if (recv_counts[index] > 0) {
      DYNCP_NCCL_CHECK(ncclRecv(at(recv, recv_offset, dtype), recv_counts[index], nccl_type(dtype),
                                peer, handles_->comm, handles_->stream));
    }
    send_offset += send_counts[index];
    recv_offset += recv_counts[index];
  }
  DYNCP_NCCL_CHECK(ncclGroupEnd());
}

void NcclComm::do_send(const void* buffer, std::size_t count, core::DType dtype, int dest_rank,
                       int /*tag: NCCL matches by call order*/) {
  order_after_compute();
  DYNCP_NCCL_CHECK(
      ncclSend(buffer, count, nccl_type(dtype), dest_rank, handles_->comm, handles_->stream));
  finish("send");
}

void NcclComm::do_recv(void* buffer, std::size_t count, core::DType dtype, int source_rank,
                       int /*tag*/) {
  order_after_compute();
  DYNCP_NCCL_CHECK(
      ncclRecv(buffer, count, nccl_type(dtype), source_rank, handles_->comm, handles_->stream));
  finish("recv");
}

int NcclComm::do_start_send_recv(const void* send, std::size_t send_count, int dest_rank,
                                 void* recv, std::size_t recv_count, int source_rank,
                                 core::DType dtype, int /*tag: NCCL matches by call order*/) {
  if (!dropped_event("start_send_recv")) order_after_compute();
  DYNCP_NCCL_CHECK(ncclGroupStart());
  if (send_count > 0 && dest_rank != rank()) {
    DYNCP_NCCL_CHECK(
        ncclSend(send, send_count, nccl_type(dtype), dest_rank, handles_->comm, handles_->stream));
  }
  if (recv_count > 0 && source_rank != rank()) {
    DYNCP_NCCL_CHECK(ncclRecv(recv, recv_count, nccl_type(dtype), source_rank, handles_->comm,
                              handles_->stream));
  }
  DYNCP_NCCL_CHECK(ncclGroupEnd());
  if (dest_rank == rank() && source_rank == rank() && recv_count > 0) {
    DYNCP_CUDA_CHECK(cudaMemcpyAsync(recv, send, recv_count * core::dtype_size(dtype),
                                     cudaMemcpyDeviceToDevice, handles_->stream));
  }
  check_async("start_send_recv");
  return record_started("send_recv");
}

int NcclComm::do_start_all_gather(const void* send, std::size_t count, void* recv,
                                  core::DType dtype) {
  if (!dropped_event("start_all_gather")) order_after_compute();
  DYNCP_NCCL_CHECK(
      ncclAllGather(send, recv, count, nccl_type(dtype), handles_->comm, handles_->stream));
  check_async("start_all_gather");
  return record_started("all_gather");
}

int NcclComm::do_start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                    void* recv, std::span<const std::size_t> recv_counts,
                                    core::DType dtype) {
  if (!dropped_event("start_all_to_all_v")) order_after_compute();
  enqueue_all_to_all_v(send, send_counts, recv, recv_counts, dtype);
  check_async("start_all_to_all_v");
  return record_started("all_to_all_v");
}

int NcclComm::do_start_broadcast(void* buffer, std::size_t count, core::DType dtype,
                                 int root_rank) {
  if (!dropped_event("start_broadcast")) order_after_compute();
  DYNCP_NCCL_CHECK(ncclBroadcast(buffer, buffer, count, nccl_type(dtype), root_rank, handles_->comm,
                                 handles_->stream));
  check_async("start_broadcast");
  return record_started("broadcast");
}

int NcclComm::do_start_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                              int root_rank) {
  if (!dropped_event("start_reduce")) order_after_compute();
  DYNCP_NCCL_CHECK(ncclReduce(data, data, count, nccl_type(dtype), nccl_op(op), root_rank,
                              handles_->comm, handles_->stream));
  check_async("start_reduce");
  return record_started("reduce");
}

void NcclComm::do_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                         int root_rank) {
  order_after_compute();
  DYNCP_NCCL_CHECK(ncclReduce(data, data, count, nccl_type(dtype), nccl_op(op), root_rank,
                              handles_->comm, handles_->stream));
  finish("reduce");
}

int NcclComm::record_started(const char* transfer) {
  int slot = 0;
  if (handles_->free_slots.empty()) {
    cudaEvent_t event = nullptr;
    DYNCP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    slot = static_cast<int>(handles_->slot_events.size());
    handles_->slot_events.push_back(event);
    handles_->slot_transfers.push_back(transfer);
  } else {
    slot = handles_->free_slots.back();
    handles_->free_slots.pop_back();
    handles_->slot_transfers[static_cast<std::size_t>(slot)] = transfer;
  }
  DYNCP_CUDA_CHECK(
      cudaEventRecord(handles_->slot_events[static_cast<std::size_t>(slot)], handles_->stream));
  return slot;
}

void NcclComm::do_start_all_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op) {
  if (!dropped_event("start_all_reduce")) order_after_compute();
  DYNCP_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(dtype), nccl_op(op), handles_->comm,
                                 handles_->stream));
  check_async("start_all_reduce");
}

void NcclComm::do_order_compute_after_started() {
  if (dropped_event("after_all_reduce")) return;
  const auto compute = static_cast<cudaStream_t>(options_.compute_stream);
  DYNCP_CUDA_CHECK(cudaEventRecord(handles_->started_done, handles_->stream));
  DYNCP_CUDA_CHECK(cudaStreamWaitEvent(compute, handles_->started_done, 0));
}

void NcclComm::do_order_compute_after(int slot) {
  handles_->free_slots.push_back(slot);
  if (dropped_event(std::string("after_") +
                    handles_->slot_transfers[static_cast<std::size_t>(slot)]))
    return;
  const auto compute = static_cast<cudaStream_t>(options_.compute_stream);
  DYNCP_CUDA_CHECK(
      cudaStreamWaitEvent(compute, handles_->slot_events[static_cast<std::size_t>(slot)], 0));
}

void NcclComm::do_wait(int slot) {
  // Polls the transfer's event (errors and the timeout checked as in synchronize()).
  cudaEvent_t event = handles_->slot_events[static_cast<std::size_t>(slot)];
  handles_->free_slots.push_back(slot);
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) DYNCP_CUDA_CHECK(status);
    check_async("wait");
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options_.timeout_seconds > 0 && waited > options_.timeout_seconds) {
      abort_communicator();
      abort_job(fmt::format(
          "NCCL communicator '{}' (rank {} of {}) did not finish a started transfer within "
          "{:g} s: another rank has failed, hung or started a different one",
          name(), rank(), size(), options_.timeout_seconds));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclComm::do_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank) {
  order_after_compute();
  DYNCP_NCCL_CHECK(ncclBroadcast(buffer, buffer, count, nccl_type(dtype), root_rank, handles_->comm,
                                 handles_->stream));
  finish("broadcast");
}

void NcclComm::do_exchange_counts(std::span<const std::size_t> send_counts,
                                  std::span<std::size_t> recv_counts) {
  // Counts live on the host; stage both directions through one device buffer.
  const std::size_t ranks = static_cast<std::size_t>(size());
  if (handles_->device_scratch_elements < 2 * ranks) {
    if (handles_->device_scratch != nullptr) DYNCP_CUDA_CHECK(cudaFree(handles_->device_scratch));
    handles_->device_scratch = nullptr;
    DYNCP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&handles_->device_scratch),
                                2 * ranks * sizeof(std::int64_t)));
    handles_->device_scratch_elements = 2 * ranks;
  }
  std::int64_t* device_send = handles_->device_scratch;
  std::int64_t* device_recv = handles_->device_scratch + ranks;
  DYNCP_CUDA_CHECK(cudaMemcpyAsync(device_send, send_counts.data(), ranks * sizeof(std::int64_t),
                                   cudaMemcpyHostToDevice, handles_->stream));
  const std::vector<std::size_t> ones(ranks, 1);
  do_all_to_all_v(device_send, ones, device_recv, ones, core::DType::i64);
  DYNCP_CUDA_CHECK(cudaMemcpyAsync(recv_counts.data(), device_recv, ranks * sizeof(std::int64_t),
                                   cudaMemcpyDeviceToHost, handles_->stream));
  synchronize();
}

void NcclComm::do_barrier() {
  order_after_compute();
  if (handles_->device_scratch == nullptr) {
    DYNCP_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&handles_->device_scratch), 2 * sizeof(std::int64_t)));
    handles_->device_scratch_elements = 2;
  }
  DYNCP_NCCL_CHECK(ncclAllReduce(handles_->device_scratch, handles_->device_scratch, 1, ncclInt64,
                                 ncclSum, handles_->comm, handles_->stream));
  synchronize();
}

std::unique_ptr<Comm> NcclComm::do_split(int color, int key, std::string name) {
  ncclComm_t child = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  DYNCP_NCCL_CHECK(
      ncclCommSplit(handles_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config));
  if (child == nullptr) return nullptr;
  int child_rank = 0;
  int child_size = 0;
  DYNCP_NCCL_CHECK(ncclCommUserRank(child, &child_rank));
  DYNCP_NCCL_CHECK(ncclCommCount(child, &child_size));
  return std::make_unique<NcclComm>(child_rank, child_size, std::move(name),
                                    make_handles(child, options_.device), options_);
}

void install_nccl_device_comms() {
  install_device_comm_factory([](Comm& bootstrap, std::string name, double timeout_seconds) {
    int device = 0;
    DYNCP_CUDA_CHECK(cudaGetDevice(&device));
    return std::unique_ptr<Comm>(NcclComm::create(
        bootstrap, std::move(name), {.device = device, .timeout_seconds = timeout_seconds}));
  });
}

}  // namespace dyncp::dist
