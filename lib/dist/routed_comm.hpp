#pragma once
// The communicator of a GPU run: one Comm whose calls go over a device communicator (NCCL)
// when their buffers are device memory and over the host communicator (MPI) when they are
// host memory. Everything written against Comm (CP exchanges, expert dispatch, gradient and
// optimizer-state sync, the trainer's host metadata) therefore runs unchanged on the GPU
// path: tensors move over NCCL, counts, flags and checkpoint metadata over MPI.
//
// Routing, per call: every non-null buffer must be on the same side (a call mixing host and
// device buffers is an error naming the operation); a call with no buffer at all (nothing to
// move on this rank) goes to the device communicator, because on a GPU run only tensor
// payloads can be empty on one rank and not on another, and every rank of one collective must
// take the same channel. barrier and exchange_counts always use the host communicator.
//
// split() splits both (collective: host first, then the device communicator's
// ncclCommSplit), so the dynamic CP groups ParallelState creates have both channels, and
// their logged creation time includes the NCCL communicator's.

#include <functional>
#include <memory>
#include <string>

#include "dist/comm.hpp"

namespace dyncp::dist {

class RoutedComm final : public Comm {
 public:
  // `host` is borrowed (the world communicator of the process) or owned (a split).
  RoutedComm(Comm& host, std::unique_ptr<Comm> device, std::string name);
  RoutedComm(std::unique_ptr<Comm> host, std::unique_ptr<Comm> device, std::string name);
  ~RoutedComm() override;

  Comm& host_channel() { return *host_; }
  Comm& device_channel() { return *device_; }

 protected:
  std::string_view do_backend() const override { return "mpi+nccl"; }
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
  Comm& route(std::string_view operation, const void* first, const void* second = nullptr);
  // Keeps a channel's handle and returns the slot that names it here.
  int keep(Comm& channel, Pending handle);

  std::unique_ptr<Comm> owned_host_;
  Comm* host_;
  std::unique_ptr<Comm> device_;
  // Started transfers by slot: which channel started them and its handle there.
  struct Started {
    Comm* channel = nullptr;
    Pending handle;
  };
  std::vector<Started> started_;
};

// The device communicator factory a GPU backend installs (NcclComm::install_factory): builds
// a device communicator with the ranks of `bootstrap`, collectively over it.
using DeviceCommFactory =
    std::function<std::unique_ptr<Comm>(Comm& bootstrap, std::string name, double timeout_s)>;
void install_device_comm_factory(DeviceCommFactory factory);
bool has_device_comm_factory();
// `world` with a device channel beside it (collective over world). Throws when no factory is
// installed (a binary without NCCL).
std::unique_ptr<Comm> make_routed_world(Comm& world, double timeout_seconds);

}  // namespace dyncp::dist
