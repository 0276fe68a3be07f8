#pragma once
// SIGTERM and SIGUSR1 (Slurm's warning before preemption or the time limit) ask the trainer to
// save a checkpoint and exit 0. The handler only sets a flag; the step loop reads it at step
// boundaries and all ranks agree on it with one small all-reduce, so they save together.

namespace dyncp::train {

void install_stop_signal_handlers();
bool stop_requested();
int stop_signal();  // the signal received, 0 if none

}  // namespace dyncp::train
