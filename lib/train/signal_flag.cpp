#include "train/signal_flag.hpp"

#include <csignal>

namespace dyncp::train {

namespace {
volatile std::sig_atomic_t received_signal = 0;
extern "C" void on_stop_signal(int signal) {
  received_signal = signal;
}
}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
}

bool stop_requested() {
  return received_signal != 0;
}
int stop_signal() {
  return static_cast<int>(received_signal);
}

}  // namespace dyncp::train
