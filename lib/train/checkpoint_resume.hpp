#pragma once
// Which checkpoint a run starts from, and whether it may write into `checkpoint.save`.
//
//   load set                      resume from load's checkpoint (none yet: start, with a warning)
//   load unset, save holds some   resume from save (Megatron's load == save auto-resume)
//   save holds checkpoints, and the run does not resume from save (load is another folder, or
//   overwrite with load unset): refused with exit 2 unless checkpoint.overwrite=true, since
//   the run would interleave its checkpoints with another run's
//   checkpoint.ckpt_step=N        that iteration exactly, instead of the newest verified one
//
// The chosen folder always verifies against its manifest (CheckpointStore::select).

#include <optional>

#include "config/config_container.hpp"
#include "dist/comm.hpp"
#include "train/checkpoint_store.hpp"

namespace dyncp::train {

// The decision above, from the filesystem as this process sees it. Throws config errors (the
// refusal) and data errors (nothing verifies).
std::optional<CheckpointChoice> choose_resume_checkpoint(const config::CheckpointConfig& checkpoint,
                                                         const SelectOptions& options = {});

// Collective: rank 0 decides, every rank gets its answer. Rank 0 verifies every checksum
// except a sharded checkpoint's shards, which the ranks hash in parallel (shard i on rank
// i % world); a shard that fails there is logged by its rank, the folder is rejected and rank
// 0 chooses again (the newest checkpoint that verifies, as in CheckpointStore::select).
std::optional<CheckpointChoice> agree_on_resume_checkpoint(
    const config::CheckpointConfig& checkpoint, dist::Comm& world);

}  // namespace dyncp::train
