#include "dist/mpi_comm.hpp"

#include <fmt/format.h>
// The C API only: OpenMPI's deprecated C++ bindings would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "dist/abort.hpp"
#include "dist/watchdog.hpp"

// Throws a runtime error naming the MPI call, the communicator and the rank.
#define DYNCP_MPI_CHECK(call)                                                                 \
  do {                                                                                        \
    const int dyncp_mpi_status = (call);                                                      \
    if (dyncp_mpi_status != MPI_SUCCESS) raise_mpi_error(dyncp_mpi_status, #call, context()); \
  } while (false)

namespace dyncp::dist {

namespace {

std::atomic<bool> mpi_runtime_created{false};

[[noreturn]] void raise_mpi_error(int status, const char* call, const std::string& where) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  core::throw_runtime_error(
      fmt::format("{}: {} failed: {}", where, call, std::string(text, length)));
}

MPI_Datatype mpi_type(core::DType dtype) {
  switch (dtype) {
    case core::DType::f32:
      return MPI_FLOAT;
    case core::DType::f64:
      return MPI_DOUBLE;
    case core::DType::i32:
      return MPI_INT32_T;
    case core::DType::i64:
      return MPI_INT64_T;
    case core::DType::u8:
      return MPI_UINT8_T;
    case core::DType::bf16:
      return MPI_UINT16_T;  // moved as bits, never reduced
  }
  return MPI_DATATYPE_NULL;
}

int as_mpi_count(std::size_t count, std::string_view what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    core::throw_runtime_error(fmt::format(
        "{}: {} elements exceed MPI's per-call limit of 2^31 - 1; split the buffer", what, count));
  }
  return static_cast<int>(count);
}

// out[k] = op(op(op(in[0][k], in[1][k]), in[2][k]), ...): the one order of the contract.
template <typename T>
void reduce_in_rank_order(const std::byte* blocks, std::size_t block_count, int num_blocks,
                          ReduceOp op, std::byte* out_bytes) {
  const T* in = reinterpret_cast<const T*>(blocks);
  T* out = reinterpret_cast<T*>(out_bytes);
  for (std::size_t k = 0; k < block_count; ++k) out[k] = in[k];
  for (int b = 1; b < num_blocks; ++b) {
    const T* block = in + static_cast<std::size_t>(b) * block_count;
    if (op == ReduceOp::sum) {
      for (std::size_t k = 0; k < block_count; ++k) out[k] = static_cast<T>(out[k] + block[k]);
    } else {
      for (std::size_t k = 0; k < block_count; ++k) out[k] = block[k] > out[k] ? block[k] : out[k];
    }
  }
}

void reduce_blocks(core::DType dtype, ReduceOp op, const std::byte* blocks, std::size_t block_count,
                   int num_blocks, std::byte* out) {
  switch (dtype) {
    case core::DType::f32:
      return reduce_in_rank_order<float>(blocks, block_count, num_blocks, op, out);
    case core::DType::f64:
      return reduce_in_rank_order<double>(blocks, block_count, num_blocks, op, out);
    case core::DType::i32:
      return reduce_in_rank_order<std::int32_t>(blocks, block_count, num_blocks, op, out);
    case core::DType::i64:
      return reduce_in_rank_order<std::int64_t>(blocks, block_count, num_blocks, op, out);
    case core::DType::u8:
      return reduce_in_rank_order<std::uint8_t>(blocks, block_count, num_blocks, op, out);
    case core::DType::bf16:
      break;
  }
  core::throw_runtime_error("reduction on a dtype without arithmetic here");
}

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm comm, std::string name, std::shared_ptr<CollectiveWatchdog> watchdog)
      : Comm(rank_of(comm), size_of(comm), std::move(name), std::move(watchdog)), comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

 protected:
  std::string_view do_backend() const override { return "mpi"; }

  void do_all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype,
                     ReduceOp op) override {
    const int n = as_mpi_count(count, context());
    const std::size_t element = core::dtype_size(dtype);
    if (size() == 1) {
      if (send != recv) std::memcpy(recv, send, count * element);
      return;
    }
    const auto ranks = static_cast<std::size_t>(size());
    if (count * ranks <= small_all_reduce_elements) {
      scratch_.resize(count * ranks * element);
      DYNCP_MPI_CHECK(
          MPI_Allgather(send, n, mpi_type(dtype), scratch_.data(), n, mpi_type(dtype), comm_));
      reduce_blocks(dtype, op, scratch_.data(), count, size(), static_cast<std::byte*>(recv));
      return;
    }
    // Block j = elements [offset_j, offset_j + count_j) with the remainder spread over the
    // first ranks: count 10 on 4 ranks gives blocks 3, 3, 2, 2.
    block_counts_.resize(ranks);
    for (std::size_t j = 0; j < ranks; ++j) block_counts_[j] = count / ranks + (j < count % ranks);
    const std::size_t own = block_counts_[static_cast<std::size_t>(rank())];
    recv_counts_.assign(ranks, own);  // every rank sends this rank `own` elements
    scratch_.resize(own * ranks * element);
    all_to_all_v_raw(send, block_counts_, scratch_.data(), recv_counts_, dtype);
    std::size_t own_offset = 0;
    for (int j = 0; j < rank(); ++j) own_offset += block_counts_[static_cast<std::size_t>(j)];
    reduce_blocks(dtype, op, scratch_.data(), own, size(),
                  static_cast<std::byte*>(recv) + own_offset * element);
    fill_displacements(block_counts_);
    DYNCP_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, counts_int_.data(),
                                   displacements_.data(), mpi_type(dtype), comm_));
  }

  void do_all_gather(const void* send, std::size_t count, void* recv, core::DType dtype) override {
    const int n = as_mpi_count(count, context());
    DYNCP_MPI_CHECK(MPI_Allgather(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_));
  }

  void do_all_gather_v(const void* send, std::size_t send_count, void* recv,
                       std::span<const std::size_t> recv_counts, core::DType dtype) override {
    const int n = as_mpi_count(send_count, context());
    fill_displacements(recv_counts);
    DYNCP_MPI_CHECK(MPI_Allgatherv(send, n, mpi_type(dtype), recv, counts_int_.data(),
                                   displacements_.data(), mpi_type(dtype), comm_));
  }

  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, core::DType dtype,
                         ReduceOp op) override {
    const int n = as_mpi_count(recv_count, context());
    const std::size_t element = core::dtype_size(dtype);
    if (size() == 1) {
      if (send != recv) std::memcpy(recv, send, recv_count * element);
      return;
    }
    const auto ranks = static_cast<std::size_t>(size());
    as_mpi_count(recv_count * ranks, context());
    scratch_.resize(recv_count * ranks * element);
    DYNCP_MPI_CHECK(
        MPI_Alltoall(send, n, mpi_type(dtype), scratch_.data(), n, mpi_type(dtype), comm_));
    reduce_blocks(dtype, op, scratch_.data(), recv_count, size(), static_cast<std::byte*>(recv));
  }

  void do_all_to_all(const void* send, void* recv, std::size_t count, core::DType dtype) override {
    const int n = as_mpi_count(count, context());
    DYNCP_MPI_CHECK(MPI_Alltoall(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_));
  }

  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                       std::span<const std::size_t> recv_counts, core::DType dtype) override {
    all_to_all_v_raw(send, send_counts, recv, recv_counts, dtype);
  }

  void do_send(const void* buffer, std::size_t count, core::DType dtype, int dest_rank,
               int tag) override {
    DYNCP_MPI_CHECK(
        MPI_Send(buffer, as_mpi_count(count, context()), mpi_type(dtype), dest_rank, tag, comm_));
  }

  void do_recv(void* buffer, std::size_t count, core::DType dtype, int source_rank,
               int tag) override {
    MPI_Status status;
    DYNCP_MPI_CHECK(MPI_Recv(buffer, as_mpi_count(count, context()), mpi_type(dtype), source_rank,
                             tag, comm_, &status));
    int received = 0;
    MPI_Get_count(&status, mpi_type(dtype), &received);
    if (static_cast<std::size_t>(received) != count) {
      core::throw_runtime_error(fmt::format("{}: recv from rank {} expected {} elements, got {}",
                                            context(), source_rank, count, received));
    }
  }

  int do_start_send_recv(const void* send, std::size_t send_count, int dest_rank, void* recv,
                         std::size_t recv_count, int source_rank, core::DType dtype,
                         int tag) override {
    const int slot = acquire_slot();
    PendingRequests& pending = pending_[static_cast<std::size_t>(slot)];
    pending.recv_count = recv_count;
    pending.dtype = dtype;
    pending.source_rank = source_rank;
    // A half of no elements addressed to this rank is not posted: a one-sided exchange.
    pending.check_receive = recv_count > 0 || source_rank != rank();
    pending.requests[0] = pending.requests[1] = MPI_REQUEST_NULL;
    // The receive is posted first so a self-exchange or an eager peer finds it waiting.
    if (pending.check_receive) {
      DYNCP_MPI_CHECK(MPI_Irecv(recv, as_mpi_count(recv_count, context()), mpi_type(dtype),
                                source_rank, tag, comm_, &pending.requests[0]));
    }
    if (send_count > 0 || dest_rank != rank()) {
      DYNCP_MPI_CHECK(MPI_Isend(send, as_mpi_count(send_count, context()), mpi_type(dtype),
                                dest_rank, tag, comm_, &pending.requests[1]));
    }
    return slot;
  }

  // Data-moving collectives, posted with MPI's non-blocking forms (the data moves when MPI makes
  // progress: during later MPI calls and the wait).
  int do_start_all_gather(const void* send, std::size_t count, void* recv,
                          core::DType dtype) override {
    const int n = as_mpi_count(count, context());
    const int slot = acquire_slot();
    DYNCP_MPI_CHECK(MPI_Iallgather(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_,
                                   &pending_[static_cast<std::size_t>(slot)].requests[0]));
    return slot;
  }

  int do_start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                            std::span<const std::size_t> recv_counts, core::DType dtype) override {
    const int slot = acquire_slot();
    PendingRequests& pending = pending_[static_cast<std::size_t>(slot)];
    // MPI reads the count and displacement arrays until the transfer completes: the slot owns
    // them.
    fill_displacements(send_counts);
    pending.send_counts = counts_int_;
    pending.send_displacements = displacements_;
    fill_displacements(recv_counts);
    pending.recv_counts = counts_int_;
    pending.recv_displacements = displacements_;
    DYNCP_MPI_CHECK(MPI_Ialltoallv(send, pending.send_counts.data(),
                                   pending.send_displacements.data(), mpi_type(dtype), recv,
                                   pending.recv_counts.data(), pending.recv_displacements.data(),
                                   mpi_type(dtype), comm_, &pending.requests[0]));
    return slot;
  }

  int do_start_broadcast(void* buffer, std::size_t count, core::DType dtype,
                         int root_rank) override {
    const int slot = acquire_slot();
    DYNCP_MPI_CHECK(MPI_Ibcast(buffer, as_mpi_count(count, context()), mpi_type(dtype), root_rank,
                               comm_, &pending_[static_cast<std::size_t>(slot)].requests[0]));
    return slot;
  }

  void do_wait(int slot) override {
    PendingRequests& pending = pending_[static_cast<std::size_t>(slot)];
    free_slots_.push_back(slot);
    MPI_Status statuses[2];
    DYNCP_MPI_CHECK(MPI_Waitall(2, pending.requests, statuses));
    if (!pending.check_receive) return;
    int received = 0;
    MPI_Get_count(&statuses[0], mpi_type(pending.dtype), &received);
    if (static_cast<std::size_t>(received) != pending.recv_count) {
      core::throw_runtime_error(
          fmt::format("{}: send_recv from rank {} expected {} elements, got {}", context(),
                      pending.source_rank, pending.recv_count, received));
    }
  }

  // Gathered on the root and added there in rank order, as all_reduce adds.
  void do_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                 int root_rank) override {
    if (size() == 1 || count == 0) return;
    const int n = as_mpi_count(count, context());
    const std::size_t element = core::dtype_size(dtype);
    const bool root = rank() == root_rank;
    if (root) scratch_.resize(count * static_cast<std::size_t>(size()) * element);
    as_mpi_count(count * static_cast<std::size_t>(size()), context());
    DYNCP_MPI_CHECK(MPI_Gather(data, n, mpi_type(dtype), root ? scratch_.data() : nullptr, n,
                               mpi_type(dtype), root_rank, comm_));
    if (root)
      reduce_blocks(dtype, op, scratch_.data(), count, size(), static_cast<std::byte*>(data));
  }

  void do_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank) override {
    DYNCP_MPI_CHECK(
        MPI_Bcast(buffer, as_mpi_count(count, context()), mpi_type(dtype), root_rank, comm_));
  }

  void do_barrier() override { DYNCP_MPI_CHECK(MPI_Barrier(comm_)); }

  std::unique_ptr<Comm> do_split(int color, int key, std::string name) override {
    MPI_Comm child = MPI_COMM_NULL;
    DYNCP_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child));
    if (child == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(child, std::move(name), watchdog());
  }

 private:
  // Below this many gathered elements the all-gather path wins: one round, no block split.
  static constexpr std::size_t small_all_reduce_elements = 16 * 1024;

  static int rank_of(MPI_Comm comm) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    return rank;
  }
  static int size_of(MPI_Comm comm) {
    int size = 0;
    MPI_Comm_size(comm, &size);
    return size;
  }

  std::string context() const {
    return fmt::format("communicator '{}' (rank {} of {})", name(), rank(), size());
  }

  void fill_displacements(std::span<const std::size_t> counts) {
    counts_int_.resize(counts.size());
    displacements_.resize(counts.size());
    std::size_t offset = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      counts_int_[i] = as_mpi_count(counts[i], context());
      displacements_[i] = as_mpi_count(offset, context());
      offset += counts[i];
    }
    as_mpi_count(offset, context());
  }

  void all_to_all_v_raw(const void* send, std::span<const std::size_t> send_counts, void* recv,
                        std::span<const std::size_t> recv_counts, core::DType dtype) {
    fill_displacements(send_counts);
    send_counts_int_ = counts_int_;
    send_displacements_ = displacements_;
    fill_displacements(recv_counts);
    DYNCP_MPI_CHECK(MPI_Alltoallv(send, send_counts_int_.data(), send_displacements_.data(),
                                  mpi_type(dtype), recv, counts_int_.data(), displacements_.data(),
                                  mpi_type(dtype), comm_));
  }

  // One started transfer: its requests (a send_recv's receive and send; a collective's one),
  // and what its wait checks. Slots are reused (grow-only).
  struct PendingRequests {
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    bool check_receive = false;  // send_recv: the received count must be recv_count
    std::size_t recv_count = 0;
    core::DType dtype = core::DType::u8;
    int source_rank = 0;
    std::vector<int> send_counts, send_displacements, recv_counts, recv_displacements;
  };

  int acquire_slot() {
    int slot = 0;
    if (free_slots_.empty()) {
      slot = static_cast<int>(pending_.size());
      pending_.emplace_back();
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    PendingRequests& pending = pending_[static_cast<std::size_t>(slot)];
    pending.requests[0] = pending.requests[1] = MPI_REQUEST_NULL;
    pending.check_receive = false;
    return slot;
  }

  MPI_Comm comm_;
  std::vector<PendingRequests> pending_;
  std::vector<int> free_slots_;
  // Grow-only scratch: after the first steps no call allocates.
  std::vector<std::byte> scratch_;
  std::vector<std::size_t> block_counts_;
  std::vector<std::size_t> recv_counts_;
  std::vector<int> counts_int_, displacements_, send_counts_int_, send_displacements_;
};

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "single";
    case MPI_THREAD_FUNNELED:
      return "funneled";
    case MPI_THREAD_SERIALIZED:
      return "serialized";
    case MPI_THREAD_MULTIPLE:
      return "multiple";
    default:
      return "unknown";
  }
}

void mpi_job_abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv, const MpiRuntimeOptions& options) {
  if (mpi_runtime_created.exchange(true)) {
    core::throw_runtime_error(
        "MPI is initialised once per process; an MpiRuntime already exists "
        "or existed (MPI cannot be initialised again after finalize)");
  }
  // MULTIPLE: the watchdog thread may call MPI_Abort while the main thread sits in a collective.
  int provided = MPI_THREAD_SINGLE;
  const int status = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (status != MPI_SUCCESS) core::throw_runtime_error("MPI_Init_thread failed");
  thread_support_ = thread_level_name(provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  set_abort_rank(world_rank_, world_size_);
  set_job_abort_function(&mpi_job_abort);
  watchdog_ = std::make_shared<CollectiveWatchdog>(options.collective_timeout_seconds);
  if (provided == MPI_THREAD_MULTIPLE && world_size_ > 1 && options.collective_timeout_seconds > 0)
    install_peer_status();
  spdlog::debug("MPI up: rank {} of {}, thread support {}, collective timeout {} s", world_rank_,
                world_size_, thread_support_, options.collective_timeout_seconds);
}

namespace {

constexpr int status_query_tag = 1;
constexpr int status_answer_tag = 2;
constexpr std::size_t max_status_text = 256;
// One MpiRuntime per process, so one status communicator.
MPI_Comm status_comm_ = MPI_COMM_NULL;

}  // namespace

void MpiRuntime::install_peer_status() {
  if (MPI_Comm_dup(MPI_COMM_WORLD, &status_comm_) != MPI_SUCCESS) {
    status_comm_ = MPI_COMM_NULL;
    return;
  }
  const MPI_Comm comm = status_comm_;
  const int me = world_rank_;
  const int size = world_size_;
  // A plain pointer, not an owning one: the hooks run only on the watchdog's own thread, inside
  // its lifetime (its destructor joins that thread). Locking a weak_ptr here made the thread
  // the last owner when the runtime released the watchdog meanwhile, and the watchdog's
  // destructor then joined its own thread (std::system_error, "Resource deadlock avoided").
  CollectiveWatchdog* const watchdog = watchdog_.get();
  CollectiveWatchdog::PeerHooks hooks;
  // Every poll period: answer each pending query with what this rank is doing.
  const auto answer_queries = [comm, watchdog] {
    for (int pending = 1; pending != 0;) {
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, status_query_tag, comm, &pending, &status);
      if (pending == 0) break;
      int query = 0;
      MPI_Recv(&query, 1, MPI_INT, status.MPI_SOURCE, status_query_tag, comm, MPI_STATUS_IGNORE);
      std::string text = watchdog->describe_self();
      text.resize(std::min(text.size(), max_status_text));
      MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, status.MPI_SOURCE,
               status_answer_tag, comm);
    }
  };
  hooks.answer_queries = answer_queries;
  // On an expiry: ask every other rank, wait a few poll periods for the answers (answering
  // theirs meanwhile: the ranks waiting with this one ask at the same moment), and name those
  // not waiting in a collective and those that do not answer.
  hooks.describe_peers = [comm, me, size, answer_queries]() -> std::string {
    static const int query = 1;  // static: the sends may complete after this returns
    std::vector<MPI_Request> sends(static_cast<std::size_t>(size), MPI_REQUEST_NULL);
    for (int peer = 0; peer < size; ++peer) {
      if (peer != me)
        MPI_Isend(&query, 1, MPI_INT, peer, status_query_tag, comm,
                  &sends[static_cast<std::size_t>(peer)]);
    }
    std::vector<std::string> answers(static_cast<std::size_t>(size));
    std::vector<bool> answered(static_cast<std::size_t>(size), false);
    int missing = size - 1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
      int pending = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, status_answer_tag, comm, &pending, &status);
      if (pending == 0) {
        answer_queries();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      int count = 0;
      MPI_Get_count(&status, MPI_CHAR, &count);
      std::string text(static_cast<std::size_t>(std::max(count, 0)), '\0');
      MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, status_answer_tag, comm,
               MPI_STATUS_IGNORE);
      const auto peer = static_cast<std::size_t>(status.MPI_SOURCE);
      if (!answered[peer]) --missing;
      answered[peer] = true;
      answers[peer] = std::move(text);
    }
    for (MPI_Request& send : sends) {
      if (send != MPI_REQUEST_NULL) MPI_Request_free(&send);
    }
    std::string culprits;
    std::string waiting;
    for (int peer = 0; peer < size; ++peer) {
      const auto k = static_cast<std::size_t>(peer);
      if (peer == me) continue;
      if (!answered[k]) {
        culprits += fmt::format("; rank {} does not answer (stopped, dead or hung hard)", peer);
      } else if (answers[k].rfind("in no collective", 0) == 0) {
        culprits += fmt::format("; rank {} is {}", peer, answers[k]);
      } else {
        waiting += (waiting.empty() ? "" : ", ") + std::to_string(peer);
      }
    }
    if (culprits.empty()) culprits = "; every rank answers and waits in a collective (a mismatch)";
    return culprits + (waiting.empty() ? "" : "; waiting too: ranks " + waiting);
  };
  watchdog_->set_peer_hooks(std::move(hooks));
}

MpiRuntime::~MpiRuntime() {
  if (watchdog_) watchdog_->set_peer_hooks({});
  watchdog_.reset();
  if (status_comm_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&status_comm_);
  }
  set_job_abort_function(nullptr);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<Comm> MpiRuntime::world(std::string name) {
  MPI_Comm duplicate = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &duplicate) != MPI_SUCCESS) {
    core::throw_runtime_error("MPI_Comm_dup(MPI_COMM_WORLD) failed");
  }
  return std::make_unique<MpiComm>(duplicate, std::move(name), watchdog_);
}

}  // namespace dyncp::dist
