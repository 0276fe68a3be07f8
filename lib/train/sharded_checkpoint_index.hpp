#pragma once
// The index of a sharded checkpoint (checkpoint format 3): which rank's file holds which slice
// of every global tensor. Written by rank 0 after every rank reported its pieces; read by every
// rank of a loading run, whatever its layout, to find the byte ranges of the slices it needs.
//
//   index.json  {"format": 1, "iteration": 40, "dtype": "F32",
//                "layout": {"world_size": 8, "data_parallel": 4, "context_parallel": 2,
//                           "expert_parallel": 4, "dynamic_context_parallel": true,
//                           "distributed_optimizer": true},
//                "files": [{"path": "shards/rank_00000.bin", "bytes": 1234}, ...],
//                "tensors": [{"name": "model.embed_tokens.weight", "shape": [V, h],
//                             "pieces": [[file, begin, end, values, exp_avg, exp_avg_sq],
//                                        ...]}, ...]}
//
// A global tensor is one HF tensor of the whole model (one per expert), its elements counted
// in the order the model stores them: HF order, except for the tensors whose rows the model
// keeps de-interleaved (model::HfTensor::rows), whose order is the model's; both depend only
// on the architecture, never on the layout. A piece covers elements [begin, end) of the
// tensor and names the byte offsets in `files[file]` of its weights and of its two Adam
// moments (fp32, little-endian, contiguous). The pieces of a tensor tile [0, numel) exactly;
// parse_sharded_index refuses anything else.

#include <cstdint>
#include <string>
#include <vector>

namespace dyncp::train {

inline constexpr const char* sharded_index_name = "index.json";

// The layout that saved (informational: loading works under any layout).
struct SavingLayout {
  int world_size = 1;
  int data_parallel = 1;
  int context_parallel = 1;
  int expert_parallel = 1;
  bool dynamic_context_parallel = false;
  bool distributed_optimizer = false;
};

struct IndexPiece {
  std::int64_t file = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::uint64_t offsets[3] = {0, 0, 0};  // bytes: weights, exp_avg, exp_avg_sq
};

struct IndexTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<IndexPiece> pieces;  // ascending begin
  std::int64_t numel() const;
};

struct IndexFile {
  std::string path;  // relative to the checkpoint folder
  std::uint64_t bytes = 0;
};

struct ShardedIndex {
  std::int64_t iteration = 0;
  SavingLayout layout;
  std::vector<IndexFile> files;
  std::vector<IndexTensor> tensors;
};

std::string sharded_index_json(const ShardedIndex& index);

// Parses and checks index text: the schema, every piece inside its file and the pieces of each
// tensor tiling it; `where` names the file in data errors.
ShardedIndex parse_sharded_index(const std::string& text, const std::string& where);

}  // namespace dyncp::train
