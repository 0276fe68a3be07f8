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
// A dense tensor is held whole by every rank of the pipeline stage that holds it (data and
// context parallelism replicate it); a piece goes to a rank of that stage (and of the EP
// slice holding its expert). When tensor parallelism cuts dense tensors too, their pieces take
// the holders' slices the way experts do.

#include <cstdint>
#include <filesystem>

#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "model/safetensors.hpp"

namespace dyncp::train {

// Collective over `world`, each rank passing its own parameters (its expert slice). Writes the
// weights (stored as `dtype`) and config.json into `folder`; returns the bytes this rank wrote.
std::uint64_t write_hf_weights_in_parallel(dist::Comm& world, const std::filesystem::path& folder,
                                           const model::Qwen3MoeParameters& parameters,
                                           model::StoredDType dtype, std::uint64_t max_shard_bytes);

}  // namespace dyncp::train
