#pragma once
// One step's microbatches through this rank's pipeline stage (docs/dist.md "Pipeline
// schedules"): the passes and point-to-point transfers of packing::plan_pipeline_rounds (1F1B,
// or interleaved 1F1B with virtual chunks; forwards alone for evaluation), round by round.
//
// Every rank of every stage holds the same Schedule (the step plans it once from the same
// lengths), so microbatch m runs on the same CP group shape, the same pool positions and zigzag
// shards, at every stage: the rank at pool position p of stage s sends its rows of m to the
// rank at position p of stage s + 1 (its pipeline group, dist::ParallelState::pipeline), which
// holds exactly those rows. A message is [stage rows, h] (model::Qwen3MoeModel::stage_rows),
// sized by both ends from their own bin; nothing about sizes is sent.
//
// Each microbatch in flight (received or forwarded, its backward not yet run) has a slot: its
// model state (saved activations), its own seams (the CP exchange and the EP dispatcher keep
// per-bin state from a forward to its backward), its bin and its transfer buffers. A slot is
// taken when the microbatch's input arrives (or its embedding forward runs) and returned after
// its backward; slots are kept from step to step, so steady steps allocate nothing.
//
// Interleaved 1F1B takes microbatches in groups of pp: a step with M not a multiple of pp runs
// the schedule of M rounded up, the extra microbatches empty (no pass, no transfer, on every
// rank alike).

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "config/pipeline_split.hpp"
#include "data/sample.hpp"
#include "dist/parallel_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "packing/packed_seq_params.hpp"
#include "packing/pipeline_rounds.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/cp_exchange.hpp"

namespace dyncp::train {

class PipelineExecutor {
 public:
  // Each microbatch's CP exchange (a2a+p2p: the subcommunicators of the step's own exchange,
  // shared); every seam counts into its counters.
  using Options = parallel::CpExchangeOptions;
  // `model` holds this rank's stage (parallel::stage_model_part of `split`).
  PipelineExecutor(model::Qwen3MoeModel& model, dist::ParallelState& parallel_state,
                   const config::PipelineSplit& split, Options options);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  struct Microbatch {
    const packing::PackedSeqParams* params = nullptr;
    std::span<const data::Sample> samples;  // this rank's samples of the bin, in bin order
    dist::Comm* group = nullptr;            // the runtime CP group (nullptr: one rank)
  };
  struct Result {
    double loss_sum = 0.0;  // this rank's cross-entropy sum (the last stage's only)
    double aux_loss = 0.0;  // this stage's layers' aux loss, counted on group rank 0
    // Measured over the pipeline group: 1 - (time in passes summed over the stages) /
    // (stages x the longest stage's time from its first round to its last).
    double bubble_fraction = 0.0;
    double busy_ms = 0.0;  // this rank: time in passes
    double wall_ms = 0.0;  // this rank: from its first round to its last
    std::int64_t rounds = 0;
  };
  // Runs every microbatch forward and, with options.compute_gradients, backward. Collective
  // over the world's pipeline and stage groups: every rank passes the same number of
  // microbatches with the same schedule. `last_layer_done`, when set, is called after each
  // layer's backward in the last microbatch's pass of every chunk (with the whole-model layer
  // index): that layer's gradients are then final (ddp.overlap_grad_reduce).
  Result run(std::span<const Microbatch> microbatches, const model::BinOptions& options,
             std::function<void(std::int64_t)> last_layer_done = {});

  // Slots made so far (the most microbatches this rank has held at once).
  std::size_t slots() const { return slots_.size(); }

 private:
  struct Slot;
  Slot& acquire(std::int64_t microbatch, std::int64_t chunk, const Microbatch& source);
  Slot& held(std::int64_t microbatch, std::int64_t chunk);
  void release(std::int64_t microbatch, std::int64_t chunk);
  void run_pass(const packing::PipelineAction& pass, std::span<const Microbatch> microbatches,
                Result& result);
  void exchange(const packing::PipelineRound& round, std::span<const Microbatch> microbatches);

  model::Qwen3MoeModel& model_;
  dist::ParallelState& parallel_state_;
  config::PipelineSplit split_;
  Options options_;
  std::vector<model::ChunkPass> chunks_;  // this stage's, by virtual chunk
  std::int64_t stage_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_;
  std::vector<Slot*> in_flight_;  // by microbatch x virtual chunks + chunk
  std::int64_t scheduled_microbatches_ = 0;
  // The rounds of each (microbatch count, forward only) met so far: planned once, so steady
  // steps allocate nothing.
  std::vector<packing::PipelinePlan> plans_;
  const packing::PipelinePlan& plan_for(std::int64_t microbatches, bool forward_only);
  model::BinOptions bin_options_;
  model::BinOptions last_bin_options_;  // the last microbatch's: with the layer hook
  double busy_ms_ = 0.0;
};

}  // namespace dyncp::train
