#include "dist/self_comm.hpp"

#include <cstring>

#include "core/error.hpp"

namespace dyncp::dist {

namespace {

void copy(const void* from, void* to, std::size_t count, core::DType dtype) {
  if (from != to && count > 0) std::memcpy(to, from, count * core::dtype_size(dtype));
}

class SelfComm final : public Comm {
 public:
  explicit SelfComm(std::string name) : Comm(0, 1, std::move(name), nullptr) {}

 protected:
  std::string_view do_backend() const override { return "self"; }
  void do_all_reduce(const void* send, void* recv, std::size_t count, core::DType dtype,
                     ReduceOp) override {
    copy(send, recv, count, dtype);
  }
  void do_all_gather(const void* send, std::size_t count, void* recv, core::DType dtype) override {
    copy(send, recv, count, dtype);
  }
  void do_all_gather_v(const void* send, std::size_t send_count, void* recv,
                       std::span<const std::size_t>, core::DType dtype) override {
    copy(send, recv, send_count, dtype);
  }
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, core::DType dtype,
                         ReduceOp) override {
    copy(send, recv, recv_count, dtype);
  }
  void do_all_to_all(const void* send, void* recv, std::size_t count, core::DType dtype) override {
    copy(send, recv, count, dtype);
  }
  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                       std::span<const std::size_t> recv_counts, core::DType dtype) override {
    if (send_counts[0] != recv_counts[0]) {
      core::throw_runtime_error("all_to_all_v on a one-rank communicator: send count " +
                                std::to_string(send_counts[0]) + " != receive count " +
                                std::to_string(recv_counts[0]));
    }
    copy(send, recv, send_counts[0], dtype);
  }
  // A rank sending to itself would need a mailbox; nothing in a one-rank run needs it.
  void do_send(const void*, std::size_t, core::DType, int, int) override {
    core::throw_runtime_error("send on a one-rank communicator '" + name() + "' has no peer");
  }
  void do_recv(void*, std::size_t, core::DType, int, int) override {
    core::throw_runtime_error("recv on a one-rank communicator '" + name() + "' has no peer");
  }
  // Rank 0 exchanging with itself (a one-rank ring): the copy happens at once.
  int do_start_send_recv(const void* send, std::size_t send_count, int, void* recv,
                         std::size_t recv_count, int, core::DType dtype, int) override {
    if (send_count != recv_count) {
      core::throw_runtime_error("send_recv on a one-rank communicator '" + name() + "': sends " +
                                std::to_string(send_count) + " elements to itself but expects " +
                                std::to_string(recv_count));
    }
    copy(send, recv, send_count, dtype);
    return 0;
  }
  void do_wait(int) override {}
  void do_broadcast(void*, std::size_t, core::DType, int) override {}
  void do_reduce(void*, std::size_t, core::DType, ReduceOp, int) override {}
  void do_barrier() override {}
  std::unique_ptr<Comm> do_split(int color, int, std::string name) override {
    if (color < 0) return nullptr;
    return std::make_unique<SelfComm>(std::move(name));
  }
};

}  // namespace

std::unique_ptr<Comm> make_self_comm(std::string name) {
  return std::make_unique<SelfComm>(std::move(name));
}

}  // namespace dyncp::dist
