#include "dist/comm.hpp"

#include <fmt/format.h>

#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "dist/watchdog.hpp"

namespace dyncp::dist {

namespace {

std::uint64_t bytes_of(std::size_t count, core::DType dtype) {
  return static_cast<std::uint64_t>(count) * core::dtype_size(dtype);
}

std::size_t sum_of(std::span<const std::size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

}  // namespace

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce:
      return "all_reduce";
    case CommOp::all_gather:
      return "all_gather";
    case CommOp::all_gather_v:
      return "all_gather_v";
    case CommOp::reduce_scatter:
      return "reduce_scatter";
    case CommOp::all_to_all:
      return "all_to_all";
    case CommOp::all_to_all_v:
      return "all_to_all_v";
    case CommOp::send:
      return "send";
    case CommOp::recv:
      return "recv";
    case CommOp::broadcast:
      return "broadcast";
    case CommOp::barrier:
      return "barrier";
    case CommOp::split:
      return "split";
    case CommOp::send_recv:
      return "send_recv";
    case CommOp::reduce:
      return "reduce";
  }
  return "?";
}

OpCounter& OpCounter::operator+=(const OpCounter& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  return *this;
}

OpCounter CommCounters::total() const {
  OpCounter sum;
  for (const auto& op : per_op) sum += op;
  return sum;
}

CommCounters& CommCounters::operator+=(const CommCounters& other) {
  for (std::size_t i = 0; i < per_op.size(); ++i) per_op[i] += other.per_op[i];
  return *this;
}

CommCounters counters_difference(const CommCounters& after, const CommCounters& before) {
  CommCounters diff;
  for (std::size_t i = 0; i < diff.per_op.size(); ++i) {
    diff.per_op[i].calls = after.per_op[i].calls - before.per_op[i].calls;
    diff.per_op[i].bytes_sent = after.per_op[i].bytes_sent - before.per_op[i].bytes_sent;
    diff.per_op[i].bytes_received =
        after.per_op[i].bytes_received - before.per_op[i].bytes_received;
  }
  return diff;
}

Comm::Comm(int rank, int size, std::string name, std::shared_ptr<CollectiveWatchdog> watchdog)
    : rank_(rank), size_(size), name_(std::move(name)), watchdog_(std::move(watchdog)) {
  DYNCP_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "rank outside the communicator");
}

Comm::~Comm() = default;

void Comm::check_span_size(std::string_view op, std::size_t actual, std::size_t expected) const {
  if (actual != expected) {
    core::throw_runtime_error(
        fmt::format("{} on communicator '{}' (rank {} of {}): got {} "
                    "elements/entries where {} are needed",
                    op, name_, rank_, size_, actual, expected));
  }
}

void Comm::check_rank(std::string_view op, std::string_view role, int peer) const {
  if (peer < 0 || peer >= size_) {
    core::throw_runtime_error(fmt::format("{} on communicator '{}': {} rank {} is outside 0..{}",
                                          op, name_, role, peer, size_ - 1));
  }
}

void Comm::check_reducible(std::string_view op, core::DType dtype) const {
  if (dtype == core::DType::bf16) {
    core::throw_runtime_error(fmt::format(
        "{} on communicator '{}': dtype bf16 cannot be reduced here; reduce in f32", op, name_));
  }
}

void Comm::count(CommOp op, std::uint64_t bytes_sent, std::uint64_t bytes_received) {
  OpCounter& counter = counters_[op];
  ++counter.calls;
  counter.bytes_sent += bytes_sent;
  counter.bytes_received += bytes_received;
}

void Comm::all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype,
                      ReduceOp op) {
  check_reducible("all_reduce", dtype);
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  const std::uint64_t moved =
      2 * bytes_of(count, dtype) * peers / static_cast<std::uint64_t>(size_);
  this->count(CommOp::all_reduce, moved, moved);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "all_reduce", name_, rank_, size_);
  do_all_reduce(send, recv, count, dtype, op);
}

void Comm::start_all_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op) {
  check_reducible("start_all_reduce", dtype);
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  const std::uint64_t moved =
      2 * bytes_of(count, dtype) * peers / static_cast<std::uint64_t>(size_);
  this->count(CommOp::all_reduce, moved, moved);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "start_all_reduce", name_, rank_, size_);
  do_start_all_reduce(data, count, dtype, op);
}

void Comm::order_compute_after_started() {
  do_order_compute_after_started();
}

void Comm::do_start_all_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op) {
  do_all_reduce(data, data, count, dtype, op);
}

void Comm::count_all_gather(std::size_t count, core::DType dtype) {
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  this->count(CommOp::all_gather, bytes_of(count, dtype) * peers, bytes_of(count, dtype) * peers);
}

void Comm::all_gather(const void* send, std::size_t count, void* recv, core::DType dtype) {
  count_all_gather(count, dtype);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "all_gather", name_, rank_, size_);
  do_all_gather(send, count, recv, dtype);
}

void Comm::all_gather_v(const void* send, std::size_t send_count, void* recv,
                        std::span<const std::size_t> recv_counts, core::DType dtype) {
  check_span_size("all_gather_v recv_counts", recv_counts.size(), static_cast<std::size_t>(size_));
  const std::size_t own = recv_counts[static_cast<std::size_t>(rank_)];
  if (send_count != own) {
    core::throw_runtime_error(fmt::format(
        "all_gather_v on communicator '{}': rank {} sends {} elements but recv_counts[{}] = {}",
        name_, rank_, send_count, rank_, own));
  }
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  this->count(CommOp::all_gather_v, bytes_of(send_count, dtype) * peers,
              bytes_of(sum_of(recv_counts) - own, dtype));
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "all_gather_v", name_, rank_, size_);
  do_all_gather_v(send, send_count, recv, recv_counts, dtype);
}

void Comm::reduce_scatter(const void* send, void* recv, std::size_t recv_count, core::DType dtype,
                          ReduceOp op) {
  check_reducible("reduce_scatter", dtype);
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  this->count(CommOp::reduce_scatter, bytes_of(recv_count, dtype) * peers,
              bytes_of(recv_count, dtype) * peers);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "reduce_scatter", name_, rank_, size_);
  do_reduce_scatter(send, recv, recv_count, dtype, op);
}

void Comm::all_to_all(const void* send, void* recv, std::size_t count, core::DType dtype) {
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  this->count(CommOp::all_to_all, bytes_of(count, dtype) * peers, bytes_of(count, dtype) * peers);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "all_to_all", name_, rank_, size_);
  do_all_to_all(send, recv, count, dtype);
}

void Comm::count_all_to_all_v(std::span<const std::size_t> send_counts,
                              std::span<const std::size_t> recv_counts, core::DType dtype) {
  check_span_size("all_to_all_v send_counts", send_counts.size(), static_cast<std::size_t>(size_));
  check_span_size("all_to_all_v recv_counts", recv_counts.size(), static_cast<std::size_t>(size_));
  const auto self = static_cast<std::size_t>(rank_);
  this->count(CommOp::all_to_all_v, bytes_of(sum_of(send_counts) - send_counts[self], dtype),
              bytes_of(sum_of(recv_counts) - recv_counts[self], dtype));
}

void Comm::all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                        std::span<const std::size_t> recv_counts, core::DType dtype) {
  count_all_to_all_v(send_counts, recv_counts, dtype);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "all_to_all_v", name_, rank_, size_);
  do_all_to_all_v(send, send_counts, recv, recv_counts, dtype);
}

void Comm::send(const void* buffer, std::size_t count, core::DType dtype, int dest_rank, int tag) {
  check_rank("send", "destination", dest_rank);
  this->count(CommOp::send, dest_rank == rank_ ? 0 : bytes_of(count, dtype), 0);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "send", name_, rank_, size_);
  do_send(buffer, count, dtype, dest_rank, tag);
}

void Comm::recv(void* buffer, std::size_t count, core::DType dtype, int source_rank, int tag) {
  check_rank("recv", "source", source_rank);
  this->count(CommOp::recv, 0, source_rank == rank_ ? 0 : bytes_of(count, dtype));
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "recv", name_, rank_, size_);
  do_recv(buffer, count, dtype, source_rank, tag);
}

void Comm::count_broadcast(std::size_t count, core::DType dtype, int root_rank) {
  check_rank("broadcast", "root", root_rank);
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  if (rank_ == root_rank) {
    this->count(CommOp::broadcast, bytes_of(count, dtype) * peers, 0);
  } else {
    this->count(CommOp::broadcast, 0, bytes_of(count, dtype));
  }
}

void Comm::broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank) {
  count_broadcast(count, dtype, root_rank);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "broadcast", name_, rank_, size_);
  do_broadcast(buffer, count, dtype, root_rank);
}

void Comm::count_reduce(std::size_t count, core::DType dtype, int root_rank) {
  check_reducible("reduce", dtype);
  check_rank("reduce", "root", root_rank);
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  if (rank_ == root_rank) {
    this->count(CommOp::reduce, 0, bytes_of(count, dtype) * peers);
  } else {
    this->count(CommOp::reduce, bytes_of(count, dtype), 0);
  }
}

void Comm::reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op, int root_rank) {
  count_reduce(count, dtype, root_rank);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "reduce", name_, rank_, size_);
  do_reduce(data, count, dtype, op, root_rank);
}

void Comm::barrier() {
  this->count(CommOp::barrier, 0, 0);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "barrier", name_, rank_, size_);
  do_barrier();
}

Comm::PendingSendRecv Comm::start_send_recv(const void* send, std::size_t send_count, int dest_rank,
                                            void* recv, std::size_t recv_count, int source_rank,
                                            core::DType dtype, int tag) {
  check_rank("start_send_recv", "destination", dest_rank);
  check_rank("start_send_recv", "source", source_rank);
  this->count(CommOp::send_recv, dest_rank == rank_ ? 0 : bytes_of(send_count, dtype),
              source_rank == rank_ ? 0 : bytes_of(recv_count, dtype));
  return {
      do_start_send_recv(send, send_count, dest_rank, recv, recv_count, source_rank, dtype, tag)};
}

Comm::Pending Comm::start_all_gather(const void* send, std::size_t count, void* recv,
                                     core::DType dtype) {
  count_all_gather(count, dtype);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "start_all_gather", name_, rank_, size_);
  return handle_of(do_start_all_gather(send, count, recv, dtype));
}

Comm::Pending Comm::start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                       void* recv, std::span<const std::size_t> recv_counts,
                                       core::DType dtype) {
  count_all_to_all_v(send_counts, recv_counts, dtype);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "start_all_to_all_v", name_, rank_, size_);
  return handle_of(do_start_all_to_all_v(send, send_counts, recv, recv_counts, dtype));
}

Comm::Pending Comm::start_broadcast(void* buffer, std::size_t count, core::DType dtype,
                                    int root_rank) {
  count_broadcast(count, dtype, root_rank);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "start_broadcast", name_, rank_, size_);
  return handle_of(do_start_broadcast(buffer, count, dtype, root_rank));
}

Comm::Pending Comm::start_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                                 int root_rank) {
  count_reduce(count, dtype, root_rank);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "start_reduce", name_, rank_, size_);
  return handle_of(do_start_reduce(data, count, dtype, op, root_rank));
}

int Comm::do_start_all_gather(const void* send, std::size_t count, void* recv, core::DType dtype) {
  do_all_gather(send, count, recv, dtype);
  return finished_slot;
}

int Comm::do_start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                void* recv, std::span<const std::size_t> recv_counts,
                                core::DType dtype) {
  do_all_to_all_v(send, send_counts, recv, recv_counts, dtype);
  return finished_slot;
}

int Comm::do_start_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank) {
  do_broadcast(buffer, count, dtype, root_rank);
  return finished_slot;
}

int Comm::do_start_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                          int root_rank) {
  do_reduce(data, count, dtype, op, root_rank);
  return finished_slot;
}

int Comm::take_slot(std::string_view op, Pending& pending) const {
  if (pending.slot == -1) {
    core::throw_runtime_error(fmt::format(
        "{} on communicator '{}' (rank {} of {}): no transfer is pending on this handle", op, name_,
        rank_, size_));
  }
  return std::exchange(pending.slot, -1);
}

void Comm::wait(Pending& pending) {
  const int slot = take_slot("wait", pending);
  if (slot == finished_slot) return;
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "wait", name_, rank_, size_);
  do_wait(slot);
}

void Comm::order_compute_after(Pending& pending) {
  const int slot = take_slot("order_compute_after", pending);
  if (slot == finished_slot) return;
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "order_compute_after", name_, rank_,
                                        size_);
  do_order_compute_after(slot);
}

std::unique_ptr<Comm> Comm::split(int color, int key, std::string name) {
  this->count(CommOp::split, 0, 0);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "split", name_, rank_, size_);
  return do_split(color, key, std::move(name));
}

void Comm::exchange_counts(std::span<const std::size_t> send_counts,
                           std::span<std::size_t> recv_counts) {
  check_span_size("exchange_counts send_counts", send_counts.size(),
                  static_cast<std::size_t>(size_));
  check_span_size("exchange_counts recv_counts", recv_counts.size(),
                  static_cast<std::size_t>(size_));
  const std::uint64_t peers = static_cast<std::uint64_t>(size_ - 1);
  this->count(CommOp::all_to_all, 8 * peers, 8 * peers);
  const CollectiveWatchdog::Guard guard(watchdog_.get(), "exchange_counts", name_, rank_, size_);
  do_exchange_counts(send_counts, recv_counts);
}

void Comm::do_exchange_counts(std::span<const std::size_t> send_counts,
                              std::span<std::size_t> recv_counts) {
  static_assert(sizeof(std::size_t) == sizeof(std::int64_t), "counts travel as 64-bit integers");
  do_all_to_all(send_counts.data(), recv_counts.data(), 1, core::DType::i64);
}

}  // namespace dyncp::dist
