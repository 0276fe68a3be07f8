#pragma once
// Emulated NCCL (nccl.cpp): the subset dyncp-train calls, with NCCL's types, names and
// semantics, carried by MPI between the processes of an mpirun job. Buffers must be device
// memory of the emulated runtime (a host pointer is an error, as on a GPU); operations run
// when they are enqueued, in stream order, and point-to-point calls between ncclGroupStart and
// ncclGroupEnd are posted together at the end of the group, so a group that would deadlock on
// NCCL deadlocks here too. Only on the include path of the emulated backend.

#include <cstddef>

#include "cuda_runtime_api.h"

#define DYNCP_NCCL_EMULATION 1
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNIQUE_ID_BYTES 128

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

struct ncclComm;
using ncclComm_t = ncclComm*;

struct ncclConfig_t {
  int blocking = 1;
};
#define NCCL_CONFIG_INITIALIZER \
  {}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id);
// The emulation joins every process of the MPI job: nranks must be the MPI world size.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId unique_id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* new_comm,
                           ncclConfig_t* config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* send, void* recv, std::size_t send_count,
                           ncclDataType_t type, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* send, void* recv, std::size_t recv_count,
                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* send, std::size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recv, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

// The last error's text on this thread (what NCCL prints as a WARN line), else the code's name.
const char* ncclGetErrorString(ncclResult_t result);
