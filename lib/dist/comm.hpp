#pragma once
// The communicator interface every distributed part of the program talks to. Backends:
// MpiComm (host buffers, lib/dist/mpi_comm.cpp) and NcclComm (device buffers, CUDA builds
// only). No backend header (mpi.h, nccl.h) is visible from here.
//
// Buffers are raw pointers plus an element count and a core::DType. Variable-size operations
// (all_gather_v, all_to_all_v) pack the per-rank blocks contiguously in rank order: block j
// starts at the sum of counts[0..j). Every rank passes the same counts where an operation
// needs every rank's count (all_gather_v).
//
// Public calls are non-virtual: they check arguments, update the per-communicator counters,
// arm the collective watchdog (a call that does not return within the timeout aborts the
// job, naming this rank) and only then reach the backend's do_* implementation.
//
// Reductions: sum and max on f32/f64/i32/i64/u8; bf16 moves but does not reduce. Every rank
// receives the same bits, run after run. MpiComm goes further: a sum is exactly
// ((x_0 + x_1) + x_2) + ... in rank order whatever the message size (mpi_comm.hpp). NcclComm
// keeps NCCL's order, fixed for one NCCL version, topology and algorithm (nccl_comm.hpp).
//
// Buffers: host memory for MpiComm, device memory for NcclComm (except the counts spans).
// One thread at a time per communicator (backends keep grow-only scratch buffers); different
// communicators may be used from different threads.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"

namespace dyncp::dist {

class CollectiveWatchdog;

enum class ReduceOp : std::uint8_t { sum, max };

enum class CommOp : std::uint8_t {
  all_reduce,
  all_gather,
  all_gather_v,
  reduce_scatter,
  all_to_all,
  all_to_all_v,
  send,
  recv,
  broadcast,
  barrier,
  split,
  send_recv,
  reduce,
};
inline constexpr std::size_t num_comm_ops = 13;
std::string_view comm_op_name(CommOp op);

// Bytes are logical payload bytes, independent of the backend's algorithm:
//   bytes_sent     = data this rank must deliver to other ranks,
//   bytes_received = data other ranks must deliver to this rank.
// all_gather(v): own block x (p - 1) sent, the others' blocks received.
// reduce_scatter: the p - 1 blocks owned by others sent, p - 1 contributions received.
// all_reduce: reduce_scatter + all_gather of n/p-element blocks: 2 n (p - 1) / p each way.
// all_to_all(v): the blocks addressed to other ranks / from other ranks.
// broadcast: the root sends n to each of p - 1 ranks; every other rank receives n.
// reduce: every other rank sends n to the root, which receives (p - 1) n.
// send, recv, send_recv: what goes to / comes from another rank (a self-peer moves nothing).
// A one-rank communicator moves nothing (0 bytes) but still counts calls.
struct OpCounter {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;

  OpCounter& operator+=(const OpCounter& other);
};

struct CommCounters {
  std::array<OpCounter, num_comm_ops> per_op{};

  const OpCounter& operator[](CommOp op) const { return per_op[static_cast<std::size_t>(op)]; }
  OpCounter& operator[](CommOp op) { return per_op[static_cast<std::size_t>(op)]; }
  OpCounter total() const;
  CommCounters& operator+=(const CommCounters& other);
};

// counters_after - counters_before, per operation (for "bytes moved by this step").
CommCounters counters_difference(const CommCounters& after, const CommCounters& before);

class Comm {
 public:
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // A short label for logs and errors, e.g. "world", "cp", "dynamic_cp4".
  const std::string& name() const { return name_; }
  std::string_view backend() const { return do_backend(); }
  // The watchdog that guards this communicator's calls (nullptr: the backend times out itself).
  const std::shared_ptr<CollectiveWatchdog>& watchdog() const { return watchdog_; }

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = CommCounters{}; }

  // recv[i] = op over ranks of send[i]; send == recv is allowed (in place).
  void all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype, ReduceOp op);
  // recv (size() * count elements) = every rank's `count` elements in rank order.
  void all_gather(const void* send, std::size_t count, void* recv, core::DType dtype);
  // recv (sum of recv_counts) = rank j's recv_counts[j] elements, packed in rank order.
  // send_count must equal recv_counts[rank()]; every rank passes the same recv_counts.
  void all_gather_v(const void* send, std::size_t send_count, void* recv,
                    std::span<const std::size_t> recv_counts, core::DType dtype);
  // send holds size() blocks of recv_count elements; rank j receives op over ranks of block j.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, core::DType dtype,
                      ReduceOp op);
  // Block j (count elements) of send goes to rank j; block i of recv came from rank i.
  void all_to_all(const void* send, void* recv, std::size_t count, core::DType dtype);
  // send_counts[j] elements to rank j, recv_counts[i] from rank i, both packed in rank order.
  // The caller must know recv_counts (exchange_counts below); they must match the peers'
  // send_counts, which only the backend can detect.
  void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                    std::span<const std::size_t> recv_counts, core::DType dtype);
  void send(const void* buffer, std::size_t count, core::DType dtype, int dest_rank, int tag = 0);
  void recv(void* buffer, std::size_t count, core::DType dtype, int source_rank, int tag = 0);
  void broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank);
  void barrier();

  // In place: the root's buffer receives op over ranks of every rank's buffer (in rank order on
  // MpiComm); the other ranks' buffers are left as they were.
  void reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op, int root_rank);

  // ---- Started collectives: transfers that overlap computation ----
  // Each start_* returns a handle at once; its buffers must not be touched until the handle is
  // finished with wait() (the host waits until the transfer is done, watchdog-guarded) or with
  // order_compute_after() (device buffers: the compute stream waits for it by an event and the
  // host does not; host buffers: the same as wait()). Every started transfer must be finished;
  // finishing resets the handle.
  //  - NcclComm enqueues the transfer on its stream behind an event on the compute stream and
  //    records an event after it: nothing waits on the host until wait().
  //  - MpiComm posts MPI's non-blocking form of the transfers that only move data (send_recv,
  //    all_gather, all_to_all_v, broadcast); a reduce is finished before start_reduce returns
  //    (MpiComm adds in its own rank order, not with MPI's reductions), so on the host a sum
  //    overlaps computation only on a thread of its own (parallel/overlapped_gradient_reduce).
  //  - SelfComm copies at once.
  struct Pending {
    int slot = -1;  // the backend's request slot; -1: nothing pending
  };
  using PendingSendRecv = Pending;

  // Non-blocking point-to-point pair (the CP ring, pipeline stages): sends send_count elements
  // to dest_rank and receives recv_count elements from source_rank into recv. Messages between
  // two ranks match in the order their exchanges were started (NCCL ignores `tag`). A peer equal
  // to this rank is a copy; a half of no elements addressed to this rank is not posted at all,
  // so an exchange may be one-sided (send only: recv_count 0, source_rank = rank(); receive
  // only likewise).
  Pending start_send_recv(const void* send, std::size_t send_count, int dest_rank, void* recv,
                          std::size_t recv_count, int source_rank, core::DType dtype, int tag = 0);
  // all_gather, all_to_all_v, broadcast and reduce, started (same arguments, same counters).
  Pending start_all_gather(const void* send, std::size_t count, void* recv, core::DType dtype);
  Pending start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                             std::span<const std::size_t> recv_counts, core::DType dtype);
  Pending start_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank);
  Pending start_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                       int root_rank);
  // Returns when the transfer is complete (watchdog-guarded); resets the handle.
  void wait(Pending& pending);
  // Device buffers: the compute stream waits for the transfer by an event (no host wait); host
  // buffers: wait(). Resets the handle.
  void order_compute_after(Pending& pending);

  // Overlapped sums (ddp.overlap_grad_reduce): an in-place sum that may still be running when
  // the call returns. Device buffers (NcclComm) are enqueued on the communicator's stream behind
  // an event on the compute stream and the call returns without waiting; host backends finish
  // before returning (run them from a thread of their own to overlap, parallel/
  // overlapped_gradient_reduce.hpp). Counted and checked like all_reduce.
  void start_all_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op);
  // Orders the compute stream after everything started on this communicator so far, by an
  // event on the compute stream: no host wait. A no-op on host backends.
  void order_compute_after_started();

  // Collective over this communicator: ranks passing the same color >= 0 form a new
  // communicator, ordered by key (ties by rank here); color < 0 yields nullptr.
  std::unique_ptr<Comm> split(int color, int key, std::string name);

  // ---- typed conveniences over the raw calls ----
  template <typename T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(data.data(), data.data(), data.size(), core::dtype_of<T>::value, op);
  }
  template <typename T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    check_span_size("all_gather", recv.size(), send.size() * static_cast<std::size_t>(size_));
    all_gather(send.data(), send.size(), recv.data(), core::dtype_of<T>::value);
  }
  template <typename T>
  void broadcast(std::span<T> data, int root_rank) {
    broadcast(data.data(), data.size(), core::dtype_of<T>::value, root_rank);
  }

  // recv_counts[i] = the number of elements rank i will send to this rank (an all_to_all of
  // one 64-bit count per peer). Both spans are host memory on every backend.
  void exchange_counts(std::span<const std::size_t> send_counts,
                       std::span<std::size_t> recv_counts);

  // Counts first, then payload: resizes recv_counts to size() and recv to their sum.
  // Keep the vectors between calls so their capacity is reused. Host payloads only (MpiComm);
  // with a device backend call exchange_counts, size the device buffer, then all_to_all_v.
  template <typename T>
  void all_to_all_v_exchange(std::span<const T> send, std::span<const std::size_t> send_counts,
                             std::vector<T>& recv, std::vector<std::size_t>& recv_counts) {
    recv_counts.resize(static_cast<std::size_t>(size_));
    exchange_counts(send_counts, recv_counts);
    std::size_t total = 0;
    for (const std::size_t count : recv_counts) total += count;
    recv.resize(total);
    all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, core::dtype_of<T>::value);
  }

 protected:
  Comm(int rank, int size, std::string name, std::shared_ptr<CollectiveWatchdog> watchdog);

  // Arguments reaching these are checked (sizes, dtype, ranks). Counts are in elements.
  virtual std::string_view do_backend() const = 0;
  virtual void do_all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype,
                             ReduceOp op) = 0;
  virtual void do_all_gather(const void* send, std::size_t count, void* recv,
                             core::DType dtype) = 0;
  virtual void do_all_gather_v(const void* send, std::size_t send_count, void* recv,
                               std::span<const std::size_t> recv_counts, core::DType dtype) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                 core::DType dtype, ReduceOp op) = 0;
  virtual void do_all_to_all(const void* send, void* recv, std::size_t count,
                             core::DType dtype) = 0;
  virtual void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                               void* recv, std::span<const std::size_t> recv_counts,
                               core::DType dtype) = 0;
  virtual void do_send(const void* buffer, std::size_t count, core::DType dtype, int dest_rank,
                       int tag) = 0;
  virtual void do_recv(void* buffer, std::size_t count, core::DType dtype, int source_rank,
                       int tag) = 0;
  virtual void do_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank) = 0;
  virtual void do_barrier() = 0;
  virtual void do_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                         int root_rank) = 0;
  // Started transfers return a slot >= 0 that do_wait() / do_order_compute_after() receive
  // back, or finished_slot when the transfer is already complete (nothing to finish).
  static constexpr int finished_slot = -2;
  virtual int do_start_send_recv(const void* send, std::size_t send_count, int dest_rank,
                                 void* recv, std::size_t recv_count, int source_rank,
                                 core::DType dtype, int tag) = 0;
  // Defaults: the blocking call, finished before returning.
  virtual int do_start_all_gather(const void* send, std::size_t count, void* recv,
                                  core::DType dtype);
  virtual int do_start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                    void* recv, std::span<const std::size_t> recv_counts,
                                    core::DType dtype);
  virtual int do_start_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank);
  virtual int do_start_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                              int root_rank);
  virtual void do_wait(int slot) = 0;
  // Default: do_wait (a host backend has no compute stream to order).
  virtual void do_order_compute_after(int slot) { do_wait(slot); }
  // Defaults: the blocking do_all_reduce, and nothing to order.
  virtual void do_start_all_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op);
  virtual void do_order_compute_after_started() {}
  virtual std::unique_ptr<Comm> do_split(int color, int key, std::string name) = 0;
  // Host counts in and out. The default is an all_to_all of one i64 per peer on the given
  // buffers, right for host backends; a device backend stages them through device memory.
  virtual void do_exchange_counts(std::span<const std::size_t> send_counts,
                                  std::span<std::size_t> recv_counts);

 private:
  void check_span_size(std::string_view op, std::size_t actual, std::size_t expected) const;
  void check_rank(std::string_view op, std::string_view role, int peer) const;
  void check_reducible(std::string_view op, core::DType dtype) const;
  void count_all_gather(std::size_t count, core::DType dtype);
  void count_all_to_all_v(std::span<const std::size_t> send_counts,
                          std::span<const std::size_t> recv_counts, core::DType dtype);
  void count_broadcast(std::size_t count, core::DType dtype, int root_rank);
  void count_reduce(std::size_t count, core::DType dtype, int root_rank);
  // A handle for a slot a backend returned (finished_slot: nothing left to finish).
  static Pending handle_of(int slot) { return {slot}; }
  int take_slot(std::string_view op, Pending& pending) const;
  void count(CommOp op, std::uint64_t bytes_sent, std::uint64_t bytes_received);

  int rank_;
  int size_;
  std::string name_;
  std::shared_ptr<CollectiveWatchdog> watchdog_;
  CommCounters counters_;
};

}  // namespace dyncp::dist
