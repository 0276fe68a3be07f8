#include "dist/routed_comm.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace dyncp::dist {

RoutedComm::RoutedComm(Comm& host, std::unique_ptr<Comm> device, std::string name)
    : Comm(host.rank(), host.size(), std::move(name), host.watchdog()),
      host_(&host),
      device_(std::move(device)) {}

RoutedComm::RoutedComm(std::unique_ptr<Comm> host, std::unique_ptr<Comm> device, std::string name)
    : Comm(host->rank(), host->size(), std::move(name), host->watchdog()),
      owned_host_(std::move(host)),
      host_(owned_host_.get()),
      device_(std::move(device)) {}

RoutedComm::~RoutedComm() = default;

Comm& RoutedComm::route(std::string_view operation, const void* first, const void* second) {
  int on_device = 0;
  int on_host = 0;
  for (const void* buffer : {first, second}) {
    if (buffer == nullptr) continue;
    (core::is_device_pointer(buffer) ? on_device : on_host) += 1;
  }
  if (on_device > 0 && on_host > 0) {
    core::throw_runtime_error(fmt::format(
        "{} on communicator '{}' (rank {} of {}) was given one host and one device buffer: "
        "both sides of a transfer must live on the same device",
        operation, name(), rank(), size()));
  }
  return on_host > 0 ? *host_ : *device_;
}

void RoutedComm::do_all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype,
                               ReduceOp op) {
  route("all_reduce", send, recv).all_reduce(send, recv, count, dtype, op);
}

void RoutedComm::do_all_gather(const void* send, std::size_t count, void* recv, core::DType dtype) {
  route("all_gather", send, recv).all_gather(send, count, recv, dtype);
}

void RoutedComm::do_all_gather_v(const void* send, std::size_t send_count, void* recv,
                                 std::span<const std::size_t> recv_counts, core::DType dtype) {
  route("all_gather_v", send, recv).all_gather_v(send, send_count, recv, recv_counts, dtype);
}

void RoutedComm::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                   core::DType dtype, ReduceOp op) {
  route("reduce_scatter", send, recv).reduce_scatter(send, recv, recv_count, dtype, op);
}

void RoutedComm::do_all_to_all(const void* send, void* recv, std::size_t count, core::DType dtype) {
  route("all_to_all", send, recv).all_to_all(send, recv, count, dtype);
}

void RoutedComm::do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                 void* recv, std::span<const std::size_t> recv_counts,
                                 core::DType dtype) {
  route("all_to_all_v", send, recv).all_to_all_v(send, send_counts, recv, recv_counts, dtype);
}

void RoutedComm::do_send(const void* buffer, std::size_t count, core::DType dtype, int dest_rank,
                         int tag) {
  route("send", buffer).send(buffer, count, dtype, dest_rank, tag);
}

void RoutedComm::do_recv(void* buffer, std::size_t count, core::DType dtype, int source_rank,
                         int tag) {
  route("recv", buffer).recv(buffer, count, dtype, source_rank, tag);
}

void RoutedComm::do_broadcast(void* buffer, std::size_t count, core::DType dtype, int root_rank) {
  route("broadcast", buffer).broadcast(buffer, count, dtype, root_rank);
}

void RoutedComm::do_barrier() {
  host_->barrier();
}

int RoutedComm::keep(Comm& channel, Pending handle) {
  if (handle.slot == finished_slot) return finished_slot;
  std::size_t slot = 0;
  while (slot < started_.size() && started_[slot].channel != nullptr) ++slot;
  if (slot == started_.size()) started_.emplace_back();
  started_[slot] = {&channel, handle};
  return static_cast<int>(slot);
}

int RoutedComm::do_start_send_recv(const void* send, std::size_t send_count, int dest_rank,
                                   void* recv, std::size_t recv_count, int source_rank,
                                   core::DType dtype, int tag) {
  Comm& channel = route("start_send_recv", send, recv);
  return keep(channel, channel.start_send_recv(send, send_count, dest_rank, recv, recv_count,
                                               source_rank, dtype, tag));
}

int RoutedComm::do_start_all_gather(const void* send, std::size_t count, void* recv,
                                    core::DType dtype) {
  Comm& channel = route("start_all_gather", send, recv);
  return keep(channel, channel.start_all_gather(send, count, recv, dtype));
}

int RoutedComm::do_start_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                      void* recv, std::span<const std::size_t> recv_counts,
                                      core::DType dtype) {
  Comm& channel = route("start_all_to_all_v", send, recv);
  return keep(channel, channel.start_all_to_all_v(send, send_counts, recv, recv_counts, dtype));
}

int RoutedComm::do_start_broadcast(void* buffer, std::size_t count, core::DType dtype,
                                   int root_rank) {
  Comm& channel = route("start_broadcast", buffer);
  return keep(channel, channel.start_broadcast(buffer, count, dtype, root_rank));
}

int RoutedComm::do_start_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                                int root_rank) {
  Comm& channel = route("start_reduce", data);
  return keep(channel, channel.start_reduce(data, count, dtype, op, root_rank));
}

void RoutedComm::do_reduce(void* data, std::size_t count, core::DType dtype, ReduceOp op,
                           int root_rank) {
  route("reduce", data).reduce(data, count, dtype, op, root_rank);
}

void RoutedComm::do_start_all_reduce(void* data, std::size_t count, core::DType dtype,
                                     ReduceOp op) {
  route("start_all_reduce", data).start_all_reduce(data, count, dtype, op);
}

void RoutedComm::do_order_compute_after_started() {
  device_->order_compute_after_started();
}

void RoutedComm::do_wait(int slot) {
  Started& started = started_.at(static_cast<std::size_t>(slot));
  Comm* channel = std::exchange(started.channel, nullptr);
  channel->wait(started.handle);
}

void RoutedComm::do_order_compute_after(int slot) {
  Started& started = started_.at(static_cast<std::size_t>(slot));
  Comm* channel = std::exchange(started.channel, nullptr);
  channel->order_compute_after(started.handle);
}

std::unique_ptr<Comm> RoutedComm::do_split(int color, int key, std::string name) {
  auto host = host_->split(color, key, name);
  auto device = device_->split(color, key, name);
  if (host == nullptr) return nullptr;
  return std::make_unique<RoutedComm>(std::move(host), std::move(device), std::move(name));
}

void RoutedComm::do_exchange_counts(std::span<const std::size_t> send_counts,
                                    std::span<std::size_t> recv_counts) {
  host_->exchange_counts(send_counts, recv_counts);
}

namespace {

DeviceCommFactory& installed_factory() {
  static DeviceCommFactory factory;
  return factory;
}

}  // namespace

void install_device_comm_factory(DeviceCommFactory factory) {
  installed_factory() = std::move(factory);
}

bool has_device_comm_factory() {
  return static_cast<bool>(installed_factory());
}

std::unique_ptr<Comm> make_routed_world(Comm& world, double timeout_seconds) {
  if (!has_device_comm_factory()) {
    core::throw_runtime_error(
        "this binary has no device communicator (it was built without NCCL): a GPU run needs "
        "dyncp-train built with CUDA and NCCL");
  }
  auto device = installed_factory()(world, world.name(), timeout_seconds);
  return std::make_unique<RoutedComm>(world, std::move(device), world.name());
}

}  // namespace dyncp::dist
