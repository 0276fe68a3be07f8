#pragma once
// What one optimizer step reports: the console line (rank 0, every logger.log_interval steps,
// in Megatron's `iteration N/M | consumed samples: ... | lm loss: ...` form) and one JSON object
// per step in logger.metrics_path. Field meanings and units are listed in docs/operations.md
// ("Metrics"); the JSON keys are the member names below.

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>

namespace dyncp::train {

// Wall time spent per phase of the step, in milliseconds.
struct StepTimeBreakdown {
  double data_ms = 0;       // sample ids, bin assembly
  double schedule_ms = 0;   // packing scheduler
  double compute_ms = 0;    // forward + backward compute (communication excluded)
  double cp_comm_ms = 0;    // K/V all-gather and dK/dV reduce-scatter on runtime CP groups
  double ep_comm_ms = 0;    // expert-parallel all-to-all (and the expert-TP gathers)
  double tp_comm_ms = 0;    // tensor-parallel sums and gathers inside the layers
  double grad_sync_ms = 0;  // loss / token counts and gradient reductions, straggler wait excluded
  // Waiting for the slowest rank of the pool, timed at a barrier before the loss-token count and
  // one before the gradient reductions (so grad_sync is the reductions alone).
  double straggler_wait_ms = 0;
  double optimizer_ms = 0;  // clip + AdamW + parameter all-gather
};

struct StepMetrics {
  std::string run_id;          // names one launch of the job (a resume is a new run)
  std::int64_t iteration = 0;  // 1-based index of the step just taken
  std::int64_t train_iters = 0;
  std::int64_t consumed_samples = 0;
  double loss = 0;       // sum of token losses / loss tokens, over the global batch
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;
  std::int64_t global_batch_size = 0;
  std::int64_t loss_tokens = 0;
  std::int64_t real_tokens = 0;    // tokens of the global batch before alignment padding
  std::int64_t padded_tokens = 0;  // after padding each sequence for the group it ran on
  double tokens_per_s = 0;         // real tokens / step time
  double tflops_per_device = 0;    // Megatron's MoE formula on padded lengths / time / world
  std::int64_t microbatches = 0;
  std::map<int, int> group_sizes;    // CP group size -> number of groups over the step
  std::int64_t comm_bytes = 0;       // bytes sent over all ranks' communicators in the step
  std::int64_t dropped_samples = 0;  // filtered by data preparation, cumulative
  std::int64_t skipped_steps = 0;    // steps without an update (NaN/inf), cumulative
  double elapsed_ms = 0;             // this step on rank 0
  double elapsed_ms_min = 0;         // fastest and slowest rank's step time
  double elapsed_ms_max = 0;
  double eta_seconds = 0;              // remaining steps x mean step time of this run so far
  std::int64_t peak_memory_bytes = 0;  // largest peak resident set over the ranks
  StepTimeBreakdown time;
  // Held-out loss (token mean over validation.eval_iters batches), on evaluation steps only.
  std::optional<double> validation_loss;
};

// The steps since the last console line, summarised as Megatron does: mean step time and the
// skipped / NaN iterations of the interval. Here a step is skipped exactly when its loss or
// gradient norm is not finite (train.stop_on_nan=false), so the two counts agree; Megatron's
// also differ by fp16 loss-scale skips, which a bf16/fp32 run does not have.
class LogInterval {
 public:
  void add(const StepMetrics& metrics, bool skipped, bool nan);
  double mean_elapsed_ms() const { return steps_ > 0 ? elapsed_ms_sum_ / steps_ : 0.0; }
  std::int64_t skipped_iterations() const { return skipped_; }
  std::int64_t nan_iterations() const { return nan_; }
  void reset() { *this = LogInterval(); }

 private:
  std::int64_t steps_ = 0;
  double elapsed_ms_sum_ = 0;
  std::int64_t skipped_ = 0;
  std::int64_t nan_ = 0;
};

// `cp1:12 cp2:3 cp4:1`
std::string format_group_histogram(const std::map<int, int>& group_sizes);
std::string format_console_line(const StepMetrics& metrics, const LogInterval& interval);
std::string to_json_line(const StepMetrics& metrics);

// Peak resident set size of this process so far (getrusage), in bytes.
std::int64_t peak_resident_bytes();
// `20261201-203015-4f2a9c`: UTC start time and a few hex digits of the process id and clock.
std::string make_run_id();

// Appends one JSON line per step; flushes each line so a killed job keeps its metrics.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // empty path: writes nothing
  // Appends one line and flushes. A failed write (a full disk) is a warning each time, never
  // silent, and returns false; the next step tries again.
  bool write(const StepMetrics& metrics);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace dyncp::train
