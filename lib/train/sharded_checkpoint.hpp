#pragma once
// Sharded training checkpoints (checkpoint format 3): every rank writes the state it owns, in
// parallel, and any layout loads them reading only the byte ranges it needs.
//
//   <save>/iter_0000040/shards/rank_00000.bin ... rank_<world-1>.bin
//   <save>/iter_0000040/model/config.json     HF config of the model
//   <save>/iter_0000040/index.json            every global tensor -> its pieces, the saving
//                                             layout (train/sharded_checkpoint_index.hpp)
//   <save>/iter_0000040/state.json            the loop state, "format": 3
//   <save>/iter_0000040/manifest.json         size and XXH3-64 of every file above
//
// What a rank owns is the distributed optimizer's division (parallel::OptimizerShards, the
// same plan with or without ddp.use_distributed_optimizer): its piece of the dense state over
// the pool and its piece of its experts' state over the expert-data-parallel group, so every
// element of the model is written by exactly one rank and each rank writes about 1/world of
// the state (12 bytes per element: the fp32 weight and both fp32 moments). Under tensor
// parallelism each TP rank's pool divides that rank's pieces (the pools of different TP ranks
// hold different pieces of a split tensor), and the tensors every TP rank holds whole (norms,
// router) are written by the pool of TP rank 0 only; the index then describes each piece as a
// run of a block of rows and columns of the whole tensor (index format 2,
// train/sharded_checkpoint_index.hpp). A rank's file is
//
//   [weights of its pieces][exp_avg of its pieces][exp_avg_sq of its pieces]
//
// in piece order, written straight from the buffers that hold the state (or from a host
// snapshot for an asynchronous save): no rank holds more than its own state, and no rank
// gathers anyone else's.
//
// Saving (collective over the world, save_sharded_checkpoint = the three steps):
//   begin   rank 0 creates the hidden temporary folder (CheckpointStore::begin); everyone
//           learns whether that worked;
//   write   every rank writes and fsyncs its file, hashing it as it goes;
//   finish  every rank reports (its pieces, its file's size and hash, or its failure); when
//           any rank failed, the save fails on every rank (the failing rank logs which file
//           and why) and rank 0 drops the folder; otherwise rank 0 writes config.json,
//           index.json, state.json and the manifest (from the reported hashes, without
//           reading the shards again) and publishes the folder (CheckpointStore::commit).
// A crash of any rank at any moment leaves the previous checkpoint complete and `latest`
// naming it, as for single-writer checkpoints.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "parallel/optimizer_shards.hpp"
#include "train/checkpoint_manifest.hpp"
#include "train/checkpoint_store.hpp"
#include "train/loop_state.hpp"
#include "train/sharded_checkpoint_index.hpp"

namespace dyncp::train {

// One contiguous slice of one global tensor that this rank writes: elements [begin, end) of
// the tensor in the whole model's storage order (index format 1) or, under tensor parallelism,
// of `block` of it (format 2).
struct RankPiece {
  std::int64_t tensor = 0;  // index in model::whole_model_tensors (the same on every rank)
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t flat_offset = 0;    // where the slice sits in all_values()
  std::int64_t packed_offset = 0;  // ... in the owned pieces packed in order (the distributed
                                   // optimizer's moments)
  // ... in this rank's file and snapshot (the pieces it writes in order: the owned pieces less
  // a tied head's copy, which the first stage writes as the embedding)
  std::int64_t file_offset = 0;
  IndexBlock block;  // rows 0: none (format 1)
  std::int64_t count() const { return end - begin; }
};

struct RankShard {
  std::vector<RankPiece> pieces;  // owned order: the dense piece's slices, then the experts'
  std::int64_t elements = 0;      // sum of the pieces' counts: what the file holds
  bool blocks = false;            // the pieces have blocks (tensor parallelism)
  std::uint64_t file_bytes() const { return static_cast<std::uint64_t>(elements) * 12; }
};

// The slices of `shards`' owned pieces, cut at tensor boundaries (under tensor parallelism also
// at the boundaries of the runs of rows the rank holds, and without the tensors that TP rank 0
// writes for every TP rank).
RankShard plan_rank_shard(const model::Qwen3MoeParameters& parameters,
                          const parallel::OptimizerShards& shards);

// Where the three parts of the state are in host memory (fp32). A flat part is laid out like
// all_values() (read at a piece's flat_offset); a packed one holds the owned pieces in order
// (read at packed_offset): the distributed optimizer's moments; a snapshot holds the written
// pieces in order (read at file_offset).
struct ShardPart {
  const float* data = nullptr;
  bool packed = false;
  bool snapshot = false;
  const float* at(const RankPiece& piece) const {
    return data + (snapshot ? piece.file_offset : packed ? piece.packed_offset : piece.flat_offset);
  }
};
struct ShardSources {
  ShardPart parts[3];  // weights, exp_avg, exp_avg_sq
};

// The rank's file bytes in memory ([weights | exp_avg | exp_avg_sq] of the pieces), and the
// sources that read it: the state captured at a step boundary for an asynchronous save.
std::vector<float> snapshot_rank_shard(const RankShard& shard, const ShardSources& sources);
ShardSources snapshot_sources(const RankShard& shard, const std::vector<float>& snapshot);

// Relative path of rank `rank`'s file.
std::string rank_shard_path(int rank);

// Collective: rank 0 (the only one with a `store`) begins a save of `iteration`; returns the
// temporary folder on every rank, or nullopt on every rank when it could not be created
// (logged on rank 0).
std::optional<std::filesystem::path> begin_sharded_save(dist::Comm& world, CheckpointStore* store,
                                                        const std::filesystem::path& save_dir,
                                                        std::int64_t iteration);

// What one rank's write produced: its manifest entry, or the failure (naming rank and file).
struct RankWriteResult {
  std::optional<ManifestEntry> written;
  std::string failure;
};

// Writes this rank's file into `folder` (no communication; safe on a background thread).
RankWriteResult write_rank_shard(const std::filesystem::path& folder, int rank,
                                 const RankShard& shard, const ShardSources& sources) noexcept;

// Collective: the finish step above. Returns true on every rank when the folder was
// published. `parameters` give the whole-model tensor list and the config.
bool finish_sharded_save(dist::Comm& world, CheckpointStore* store,
                         const std::filesystem::path& folder,
                         const model::Qwen3MoeParameters& parameters, const RankShard& shard,
                         const RankWriteResult& result, const LoopState& state,
                         const SavingLayout& layout);

// begin + write + finish.
bool save_sharded_checkpoint(dist::Comm& world, CheckpointStore* store,
                             const std::filesystem::path& save_dir,
                             const model::Qwen3MoeParameters& parameters, const RankShard& shard,
                             const ShardSources& sources, const LoopState& state,
                             const SavingLayout& layout);

// Whether `folder` holds a sharded checkpoint (an index.json).
bool is_sharded_checkpoint(const std::filesystem::path& folder);

// Reads a verified sharded checkpoint of either index format into `parameters` (every tensor
// they hold; under EP only their experts, under tensor parallelism only their pieces) and into
// the flat moments (laid out like all_values()), but only the moment elements inside
// `moment_ranges` (flat ranges: what the loading optimizer keeps; the rest is left as it is).
// Only the byte ranges of those slices are read, in reads of at most a few MiB (a piece whose
// rows are wider than the loading rank's takes one read for several of its rows, skipping
// over the columns of the others). Data errors name the file.
LoopState read_sharded_checkpoint(const std::filesystem::path& folder, std::int64_t iteration,
                                  const model::Qwen3MoeParameters& parameters,
                                  const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                                  std::span<const parallel::ParameterRange> moment_ranges);

}  // namespace dyncp::train
