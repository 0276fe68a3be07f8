#pragma once
// The HF export of a training run written by the ranks that hold the tensors, in parallel: the
// same files, byte for byte, as model::save_hf_checkpoint writes from the whole model on one
// process, whatever the layout that writes them.
//
//   plan     every rank lists the export's tensors in file order (one per expert, or each MoE
//            layer's experts fused into gate_up_proj [E, 2I, h] and down_proj [E, h, I]),
//            splits them into files of at most max_shard_bytes (model.safetensors, or
//            model-0000k-of-0000n.safetensors) and cuts them into pieces: a run of a dense
//            tensor (about 1/(8 world) of the dense elements; whole when the model keeps its
//            rows reordered), one expert's tensor, or one expert's rows of a fused tensor. Each
//            piece goes to one of the ranks that hold it (an expert's pieces to a rank of its EP
//            slice, dense ones to any rank), the least loaded so far, so every rank computes
//            the same assignment and writes about 1/world of the bytes.
//   create   the rank owning file k (k % world) creates `<file>.partial` with its header at its
//            full size;
//   write    every rank writes its pieces' bytes at their offsets (pwrite, one piece's values
//            in memory at a time) and fsyncs;
//   publish  when every rank succeeded, rank 0 renames the files into place and writes
//            model.safetensors.index.json (more than one file) and config.json; otherwise the
//            partial files are removed and every rank throws a runtime error naming the rank
//            and the file that failed.
// Under tensor parallelism a rank holds only its piece of a split tensor (and with
// expert_tensor_parallel_size > 1 of each of its experts). A piece of the export (of the
// tensor in HF order, cut into runs as above whatever order the model stores its rows in) is
// then assigned to a rank as before, all ranks holding a piece of a split tensor, and rebuilt
// by that rank's TP group (for experts its expert-TP group): each member writes what it holds
// of the piece into a buffer of -0.0 and the group sums it (exact: x + (-0.0) == x), then the
// assigned rank writes it. The members run their groups' pieces in file order, so the sums
// match; a member whose write fails keeps taking part in them and reports afterwards. Under
// pipeline parallelism a dense tensor is held by the ranks of the stage holding it, and its
// pieces go to ranks of that stage.

#include <cstdint>
#include <filesystem>

#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "model/safetensors.hpp"

namespace dyncp::train {

// The groups that hold split tensors together: this rank's TP group (tensor parallelism) and
// expert-TP group (expert_tensor_parallel_size > 1); null where the parameters hold no such
// pieces.
struct ExportGroups {
  dist::Comm* tensor_parallel = nullptr;
  dist::Comm* expert_tensor_parallel = nullptr;
};

// Collective over `world`, each rank passing its own parameters (its expert slice, its TP
// pieces). Writes the weights (stored as `dtype`) and config.json into `folder`; returns the
// bytes this rank wrote. Parameters holding pieces need `groups` (a runtime error otherwise).
std::uint64_t write_hf_weights_in_parallel(dist::Comm& world, const std::filesystem::path& folder,
                                           const model::Qwen3MoeParameters& parameters,
                                           model::StoredDType dtype, std::uint64_t max_shard_bytes,
                                           const ExportGroups& groups = {});

}  // namespace dyncp::train
