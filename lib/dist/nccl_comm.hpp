#pragma once
// NCCL backend of Comm, on device buffers (library dyncp_dist_nccl, built only with CUDA).
// No CUDA or NCCL header is visible from here.
//
//  - Creation: rank 0 of a bootstrap communicator (normally the MpiComm world) makes an
//    ncclUniqueId and broadcasts it over the bootstrap; every rank then joins with
//    ncclCommInitRank on its device. Sub-communicators come from ncclCommSplit (split()).
//  - One CUDA stream per communicator; every operation is enqueued on it. With
//    NcclCommOptions::synchronous (the default) each call waits for its stream before
//    returning, so the semantics equal MpiComm's; otherwise call synchronize().
//  - Waiting polls the stream and ncclCommGetAsyncError. An NCCL error aborts the
//    communicator (ncclCommAbort) and throws; a wait longer than timeout_seconds aborts the
//    communicator and the job (abort_job), naming the rank and the operation. Live
//    communicators are also aborted by abort_job.
//  - all_gather_v and all_to_all_v are grouped ncclSend/ncclRecv; send/recv ignore `tag`
//    (NCCL matches point-to-point calls by order); barrier is a one-element all-reduce.
//  - Started transfers (start_send_recv, start_all_gather, start_all_to_all_v,
//    start_broadcast, start_reduce) are enqueued behind the compute stream's event, followed by
//    an event of their own (a slot), and return without waiting (even when synchronous); wait()
//    polls that event (the host waits for that transfer only), order_compute_after() makes the
//    compute stream wait for it (the host does not).
//  - start_all_reduce enqueues behind the compute stream's event and returns without waiting
//    (even when synchronous); order_compute_after_started records an event on the stream and
//    makes the compute stream wait for it, so the consumer waits on the device, not the host.
//  - Reduction order is NCCL's: identical on every rank and run to run for one NCCL version,
//    topology and algorithm (pin NCCL_ALGO / NCCL_PROTO to keep it across jobs), but not the
//    rank order MpiComm guarantees.
//
// Built twice: against the CUDA toolkit and NCCL (dyncp_dist_nccl) and against the emulated
// runtime and NCCL over MPI (dyncp_dist_nccl_emulated, kernels/emulation/), which is how CI
// runs multi-rank GPU training; real multi-GPU NCCL has not run yet (docs/cuda.md).

#include <memory>
#include <string>

#include "dist/comm.hpp"

namespace dyncp::dist {

struct NcclCommOptions {
  int device = 0;                  // CUDA device of this rank (normally the local rank)
  double timeout_seconds = 600.0;  // longest wait for one operation's stream
  bool synchronous = true;         // wait for the stream at the end of every call
  // The stream the kernels run on (cudaStream_t as an opaque pointer; nullptr: the default
  // stream). Every operation is ordered after the work enqueued there so far, by an event.
  void* compute_stream = nullptr;
};

// Makes NcclComm the device communicator of GPU runs (dist::make_routed_world), on the
// current CUDA device.
void install_nccl_device_comms();

class NcclComm final : public Comm {
 public:
  // Collective over `bootstrap`; the new communicator has bootstrap's ranks and size.
  static std::unique_ptr<NcclComm> create(Comm& bootstrap, std::string name,
                                          const NcclCommOptions& options = {});
  ~NcclComm() override;

  // The communicator's cudaStream_t, as an opaque pointer.
  void* stream_handle() const;
  // Waits for everything enqueued on the stream (error and timeout checks as above).
  void synchronize();

  struct Handles;  // CUDA/NCCL objects; defined in nccl_comm.cpp
  NcclComm(int rank, int size, std::string name, std::unique_ptr<Handles> handles,
           const NcclCommOptions& options);

 protected:
  std::string_view do_backend() const override { return "nccl"; }
  void do_all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype,
                     ReduceOp op) override;
  void do_all_gather(const void* send, std::size_t count, void* recv, core::DType dtype) override;
  void do_all_gather_v(const void* send, std::size_t send_count, void* recv,
                       std::span<const std::size_t> recv_counts, core::DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, core::DType dtype,
                         ReduceOp op) override;
  void do_all_to_all(const void* send, void* recv, std::size_t count, core::DType dtype) override;
  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                       std::span<const std::size_t> recv_counts, core::DType dtype) override;
  void do_send(const void* buffer, std::size_t count, core::DType dtype, int dest_rank,
               int tag) override;
  void do_recv(void* buffer, std::size_t count, core::DType dtype, int source_rank,
               int tag) override;
  void do_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank) override;
  void do_barrier() override;
  void do_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                 int root_rank) override;
  int do_start_send_recv(const void* send, std::size_t send_count, int dest_rank, void* recv,
                         std::size_t recv_count, int source_rank, core::DType dtype,
                         int tag) override;
  int do_start_all_gather(const void* send, std::size_t count, void* recv,
                          core::DType dtype) override;
  int do_start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                            std::span<const std::size_t> recv_counts, core::DType dtype) override;
  int do_start_broadcast(void* buffer, std::size_t count, core::DType dtype,
                         int root_rank) override;
  int do_start_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                      int root_rank) override;
  void do_wait(int slot) override;
  void do_order_compute_after(int slot) override;
  void do_start_all_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op) override;
  void do_order_compute_after_started() override;
  std::unique_ptr<Comm> do_split(int color, int key, std::string name) override;
  void do_exchange_counts(std::span<const std::size_t> send_counts,
                          std::span<std::size_t> recv_counts) override;

 private:
  void order_after_compute();
  // Records the slot event after what was just enqueued (`transfer`: its name); returns the
  // slot.
  int record_started(const char* transfer);
  void enqueue_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                            std::span<const std::size_t> recv_counts, core::DType dtype);
  void finish(const char* operation);
  void check_async(const char* operation);
  void abort_communicator();

  std::unique_ptr<Handles> handles_;
  NcclCommOptions options_;
};

}  // namespace dyncp::dist
