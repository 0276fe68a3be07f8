// The emulated NCCL over MPI (include/nccl.h). Each communicator is an MPI communicator with
// the same ranks; payloads are read and written in the emulated device heap, which is opened
// only for the duration of a transfer. Reductions combine the ranks' contributions in rank
// order, so every rank gets the same bits run after run (real NCCL fixes its own order).
#include "nccl.h"

// The C API only (the C++ bindings need a library dyncp does not link).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device_heap.hpp"
#include "runtime_state.hpp"
#include "streams.hpp"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  bool aborted = false;
};

namespace dyncp::emulation {
namespace {

thread_local std::string last_nccl_error;

// A point-to-point call waiting for the end of its group.
struct PendingTransfer {
  bool is_send;
  void* buffer;
  std::size_t bytes;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};
thread_local int group_depth = 0;
thread_local std::vector<PendingTransfer> group_transfers;

constexpr int transfer_tag = 0x6e63;  // one tag: MPI then matches in call order, as NCCL does

ncclResult_t fail(ncclResult_t result, std::string message) {
  last_nccl_error = std::move(message);
  std::fprintf(stderr, "NCCL WARN (emulated) %s\n", last_nccl_error.c_str());
  return result;
}

std::size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

ncclResult_t check_comm(ncclComm_t comm, const char* call) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": null communicator");
  if (comm->aborted) {
    return fail(ncclInvalidUsage, std::string(call) + ": the communicator has been aborted");
  }
  return ncclSuccess;
}

ncclResult_t check_buffer(const void* buffer, std::size_t bytes, const char* call,
                          const char* role) {
  if (bytes == 0) return ncclSuccess;
  if (DeviceHeap::instance().covers(buffer, bytes)) return ncclSuccess;
  char text[256];
  std::snprintf(text, sizeof text,
                "%s: %s buffer %p (%zu bytes) is not inside one device allocation (NCCL moves "
                "device memory only)",
                call, role, buffer, bytes);
  return fail(ncclInvalidArgument, text);
}

ncclResult_t check_call(ncclComm_t comm, ncclDataType_t type, cudaStream_t stream,
                        const char* call) {
  if (const ncclResult_t status = check_comm(comm, call); status != ncclSuccess) return status;
  if (type_size(type) == 0) return fail(ncclInvalidArgument, std::string(call) + ": bad type");
  if (!stream_is_valid(stream)) {
    return fail(ncclInvalidArgument, std::string(call) + ": invalid CUDA stream");
  }
  // The transfer runs now, after the work its stream was ordered behind (streams.hpp): without
  // an event on the producing stream it reads the buffer before that work has written it.
  dyncp::emulation::drain(stream);
  return ncclSuccess;
}

ncclResult_t mpi_status(int code, const char* call) {
  if (code == MPI_SUCCESS) return ncclSuccess;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return fail(ncclSystemError, std::string(call) + ": MPI: " + std::string(text, length));
}

// A transfer's result, written into device memory when its stream reaches the call: at once in
// the immediate order; in the deferred orders as work queued on the stream, so that only a
// consumer ordered after the call (an event recorded on that stream) is sure to see it.
void land(cudaStream_t stream, void* destination, std::vector<unsigned char> bytes) {
  if (bytes.empty()) return;
  if (!deferred_order()) {
    DeviceAccess access;
    std::memcpy(destination, bytes.data(), bytes.size());
    return;
  }
  auto held = std::make_shared<std::vector<unsigned char>>(std::move(bytes));
  submit(stream, [destination, held] {
    DeviceAccess access;
    std::memcpy(destination, held->data(), held->size());
  });
}

template <typename T>
void combine(T* out, const T* in, std::size_t count, ncclRedOp_t op) {
  for (std::size_t i = 0; i < count; ++i) {
    switch (op) {
      case ncclSum:
      case ncclAvg:
        out[i] = out[i] + in[i];
        break;
      case ncclProd:
        out[i] = out[i] * in[i];
        break;
      case ncclMax:
        out[i] = in[i] > out[i] ? in[i] : out[i];
        break;
      case ncclMin:
        out[i] = in[i] < out[i] ? in[i] : out[i];
        break;
    }
  }
}

template <typename T>
void reduce_blocks(T* out, const unsigned char* blocks, int ranks, std::size_t count,
                   ncclRedOp_t op) {
  const T* first = reinterpret_cast<const T*>(blocks);
  std::vector<T> result(first, first + count);
  for (int r = 1; r < ranks; ++r) {
    combine(result.data(), reinterpret_cast<const T*>(blocks) + r * count, count, op);
  }
  if (op == ncclAvg) {
    for (T& value : result) value = static_cast<T>(value / static_cast<T>(ranks));
  }
  std::memcpy(out, result.data(), count * sizeof(T));
}

// out = op over the `ranks` blocks of `count` elements, combined in rank order.
ncclResult_t reduce_in_rank_order(void* out, const std::vector<unsigned char>& blocks, int ranks,
                                  std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  const char* call) {
  const unsigned char* data = blocks.data();
  switch (type) {
    case ncclFloat32:
      reduce_blocks(static_cast<float*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclFloat64:
      reduce_blocks(static_cast<double*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclInt32:
      reduce_blocks(static_cast<std::int32_t*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclUint32:
      reduce_blocks(static_cast<std::uint32_t*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclInt64:
      reduce_blocks(static_cast<std::int64_t*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclUint64:
      reduce_blocks(static_cast<std::uint64_t*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclUint8:
      reduce_blocks(static_cast<std::uint8_t*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclInt8:
      reduce_blocks(static_cast<std::int8_t*>(out), data, ranks, count, op);
      return ncclSuccess;
    case ncclFloat16:
    case ncclBfloat16:
      break;
  }
  return fail(ncclInvalidArgument,
              std::string(call) + ": the emulation reduces no 16-bit floating-point type");
}

ncclResult_t post_transfers(std::vector<PendingTransfer>& transfers) {
  std::vector<MPI_Request> requests;
  requests.reserve(transfers.size());
  // Deferred orders: receives go to host staging and land as work of their streams.
  const bool staged = deferred_order();
  std::vector<std::vector<unsigned char>> staging(transfers.size());
  DeviceAccess access;
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    const PendingTransfer& transfer = transfers[i];
    MPI_Request request = MPI_REQUEST_NULL;
    const int count = static_cast<int>(transfer.bytes);
    void* target = transfer.buffer;
    if (staged && !transfer.is_send) {
      staging[i].resize(transfer.bytes);
      target = staging[i].data();
    }
    const int code = transfer.is_send ? MPI_Isend(transfer.buffer, count, MPI_BYTE, transfer.peer,
                                                  transfer_tag, transfer.comm->mpi, &request)
                                      : MPI_Irecv(target, count, MPI_BYTE, transfer.peer,
                                                  transfer_tag, transfer.comm->mpi, &request);
    if (code != MPI_SUCCESS) return mpi_status(code, transfer.is_send ? "ncclSend" : "ncclRecv");
    requests.push_back(request);
  }
  const ncclResult_t status = mpi_status(
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
      "ncclGroupEnd");
  if (staged && status == ncclSuccess) {
    for (std::size_t i = 0; i < transfers.size(); ++i)
      if (!transfers[i].is_send)
        land(transfers[i].stream, transfers[i].buffer, std::move(staging[i]));
  }
  transfers.clear();
  return status;
}

ncclResult_t point_to_point(bool is_send, void* buffer, std::size_t count, ncclDataType_t type,
                            int peer, ncclComm_t comm, cudaStream_t stream) {
  const char* call = is_send ? "ncclSend" : "ncclRecv";
  if (const ncclResult_t status = check_call(comm, type, stream, call); status != ncclSuccess) {
    return status;
  }
  if (peer < 0 || peer >= comm->size) {
    return fail(ncclInvalidArgument, std::string(call) + ": peer " + std::to_string(peer) +
                                         " outside a communicator of " +
                                         std::to_string(comm->size) + " ranks");
  }
  const std::size_t bytes = count * type_size(type);
  if (const ncclResult_t status = check_buffer(buffer, bytes, call, is_send ? "send" : "recv");
      status != ncclSuccess) {
    return status;
  }
  if (bytes > static_cast<std::size_t>(INT32_MAX)) {
    return fail(ncclInvalidArgument, std::string(call) + ": message over 2 GiB");
  }
  if (bytes == 0) return ncclSuccess;
  group_transfers.push_back({is_send, buffer, bytes, peer, comm, stream});
  if (group_depth > 0) return ncclSuccess;
  return post_transfers(group_transfers);
}

// Every rank's `bytes` from `send`, in rank order (host copy).
ncclResult_t gather_all(const void* send, std::size_t bytes, ncclComm_t comm,
                        std::vector<unsigned char>& blocks, const char* call) {
  blocks.resize(bytes * static_cast<std::size_t>(comm->size));
  DeviceAccess access;
  return mpi_status(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, blocks.data(),
                                  static_cast<int>(bytes), MPI_BYTE, comm->mpi),
                    call);
}

}  // namespace
}  // namespace dyncp::emulation

using namespace dyncp::emulation;

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  std::random_device device;
  for (char& byte : unique_id->internal) byte = static_cast<char>(device());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId /*unique_id*/, int rank) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    return fail(ncclSystemError,
                "ncclCommInitRank: the emulated NCCL runs over MPI, which is "
                "not initialised in this process");
  }
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (nranks != world_size) {
    return fail(ncclInvalidUsage,
                "ncclCommInitRank: the emulation builds only world communicators (" +
                    std::to_string(nranks) + " ranks asked, the MPI world has " +
                    std::to_string(world_size) + "); make others with ncclCommSplit");
  }
  auto* created = new ncclComm;
  if (const ncclResult_t status =
          mpi_status(MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &created->mpi), "ncclCommInitRank");
      status != ncclSuccess) {
    delete created;
    return status;
  }
  MPI_Comm_rank(created->mpi, &created->rank);
  MPI_Comm_size(created->mpi, &created->size);
  *comm = created;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* new_comm,
                           ncclConfig_t* /*config*/) {
  *new_comm = nullptr;
  if (const ncclResult_t status = check_comm(comm, "ncclCommSplit"); status != ncclSuccess) {
    return status;
  }
  MPI_Comm child = MPI_COMM_NULL;
  const int mpi_color = color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color;
  if (const ncclResult_t status =
          mpi_status(MPI_Comm_split(comm->mpi, mpi_color, key, &child), "ncclCommSplit");
      status != ncclSuccess) {
    return status;
  }
  if (child == MPI_COMM_NULL) return ncclSuccess;
  auto* created = new ncclComm;
  created->mpi = child;
  MPI_Comm_rank(child, &created->rank);
  MPI_Comm_size(child, &created->size);
  *new_comm = created;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  // Real NCCL frees the communicator; the emulation marks it so later use is an error, and
  // leaves the MPI communicator to the job's abort (freeing it is collective).
  if (comm != nullptr) comm->aborted = true;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  *async_error = ncclSuccess;
  return check_comm(comm, "ncclCommGetAsyncError");
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t status = check_call(comm, type, stream, "ncclAllReduce");
      status != ncclSuccess) {
    return status;
  }
  const std::size_t bytes = count * type_size(type);
  if (ncclResult_t status = check_buffer(send, bytes, "ncclAllReduce", "send");
      status != ncclSuccess ||
      (status = check_buffer(recv, bytes, "ncclAllReduce", "recv")) != ncclSuccess) {
    return status;
  }
  std::vector<unsigned char> blocks;
  if (const ncclResult_t status = gather_all(send, bytes, comm, blocks, "ncclAllReduce");
      status != ncclSuccess) {
    return status;
  }
  std::vector<unsigned char> result(bytes);
  if (const ncclResult_t status =
          reduce_in_rank_order(result.data(), blocks, comm->size, count, type, op, "ncclAllReduce");
      status != ncclSuccess) {
    return status;
  }
  land(stream, recv, std::move(result));
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, std::size_t send_count,
                           ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t status = check_call(comm, type, stream, "ncclAllGather");
      status != ncclSuccess) {
    return status;
  }
  const std::size_t bytes = send_count * type_size(type);
  if (ncclResult_t status = check_buffer(send, bytes, "ncclAllGather", "send");
      status != ncclSuccess ||
      (status = check_buffer(recv, bytes * static_cast<std::size_t>(comm->size), "ncclAllGather",
                             "recv")) != ncclSuccess) {
    return status;
  }
  std::vector<unsigned char> blocks;
  if (const ncclResult_t status = gather_all(send, bytes, comm, blocks, "ncclAllGather");
      status != ncclSuccess) {
    return status;
  }
  land(stream, recv, std::move(blocks));
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, std::size_t recv_count,
                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (const ncclResult_t status = check_call(comm, type, stream, "ncclReduceScatter");
      status != ncclSuccess) {
    return status;
  }
  const std::size_t bytes = recv_count * type_size(type);
  if (ncclResult_t status = check_buffer(send, bytes * static_cast<std::size_t>(comm->size),
                                         "ncclReduceScatter", "send");
      status != ncclSuccess ||
      (status = check_buffer(recv, bytes, "ncclReduceScatter", "recv")) != ncclSuccess) {
    return status;
  }
  // Block r of every rank's send comes to rank r, which combines them in rank order.
  std::vector<unsigned char> blocks(bytes * static_cast<std::size_t>(comm->size));
  {
    DeviceAccess access;
    if (const ncclResult_t status =
            mpi_status(MPI_Alltoall(send, static_cast<int>(bytes), MPI_BYTE, blocks.data(),
                                    static_cast<int>(bytes), MPI_BYTE, comm->mpi),
                       "ncclReduceScatter");
        status != ncclSuccess) {
      return status;
    }
  }
  std::vector<unsigned char> result(bytes);
  if (const ncclResult_t status = reduce_in_rank_order(result.data(), blocks, comm->size,
                                                       recv_count, type, op, "ncclReduceScatter");
      status != ncclSuccess) {
    return status;
  }
  land(stream, recv, std::move(result));
  return ncclSuccess;
}

ncclResult_t ncclReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t status = check_call(comm, type, stream, "ncclReduce");
      status != ncclSuccess) {
    return status;
  }
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclReduce: bad root");
  const std::size_t bytes = count * type_size(type);
  if (ncclResult_t status = check_buffer(send, bytes, "ncclReduce", "send");
      status != ncclSuccess ||
      (comm->rank == root &&
       (status = check_buffer(recv, bytes, "ncclReduce", "recv")) != ncclSuccess)) {
    return status;
  }
  // Every rank's block comes to the root, which combines them in rank order.
  const bool is_root = comm->rank == root;
  std::vector<unsigned char> blocks(is_root ? bytes * static_cast<std::size_t>(comm->size) : 0);
  {
    DeviceAccess access;
    if (const ncclResult_t status = mpi_status(
            MPI_Gather(send, static_cast<int>(bytes), MPI_BYTE, is_root ? blocks.data() : nullptr,
                       static_cast<int>(bytes), MPI_BYTE, root, comm->mpi),
            "ncclReduce");
        status != ncclSuccess) {
      return status;
    }
  }
  if (!is_root) return ncclSuccess;
  std::vector<unsigned char> result(bytes);
  if (const ncclResult_t status =
          reduce_in_rank_order(result.data(), blocks, comm->size, count, type, op, "ncclReduce");
      status != ncclSuccess) {
    return status;
  }
  land(stream, recv, std::move(result));
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t status = check_call(comm, type, stream, "ncclBroadcast");
      status != ncclSuccess) {
    return status;
  }
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclBroadcast: bad root");
  const std::size_t bytes = count * type_size(type);
  if (ncclResult_t status = check_buffer(recv, bytes, "ncclBroadcast", "recv");
      status != ncclSuccess ||
      (comm->rank == root &&
       (status = check_buffer(send, bytes, "ncclBroadcast", "send")) != ncclSuccess)) {
    return status;
  }
  // The root's bytes travel through host staging; they land on the other ranks (and on the
  // root when it broadcasts out of place) as work of the stream.
  std::vector<unsigned char> staging(bytes);
  {
    DeviceAccess access;
    if (comm->rank == root && bytes > 0) std::memcpy(staging.data(), send, bytes);
    if (const ncclResult_t status = mpi_status(
            MPI_Bcast(staging.data(), static_cast<int>(bytes), MPI_BYTE, root, comm->mpi),
            "ncclBroadcast");
        status != ncclSuccess) {
      return status;
    }
  }
  if (comm->rank != root || send != recv) land(stream, recv, std::move(staging));
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* send, std::size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return point_to_point(true, const_cast<void*>(send), count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recv, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(false, recv, count, type, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  // A group abandoned by an error (its caller threw) must not leak into the next one.
  if (group_depth++ == 0) group_transfers.clear();
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  return post_transfers(group_transfers);
}

const char* ncclGetErrorString(ncclResult_t result) {
  if (result != ncclSuccess && !last_nccl_error.empty()) return last_nccl_error.c_str();
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}
