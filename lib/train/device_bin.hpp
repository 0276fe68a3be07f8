#pragma once
// A host bin's per-token tensors (token ids, labels, positions, loss mask, real-token mask)
// copied into device memory for a GPU step; cu_seqlens stays on the host (the ops size their
// work from it) and the positions are kept on the host too (host_positions).

#include "core/arena.hpp"
#include "model/qwen3_moe_model.hpp"

namespace dyncp::train {

// Resets `arena` (device memory) and fills `device_bin` from it; returns device_bin.
const model::PackedBin& upload_bin(core::Arena& arena, const model::PackedBin& host_bin,
                                   model::PackedBin& device_bin);

}  // namespace dyncp::train
