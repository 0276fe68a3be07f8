#pragma once
// The index of a sharded checkpoint (checkpoint format 3): which rank's file holds which slice
// of every global tensor. Written by rank 0 after every rank reported its pieces; read by every
// rank of a loading run, whatever its layout, to find the byte ranges of the slices it needs.
//
// Index format 1 (a layout without tensor parallelism):
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
// in the order the whole model stores them: HF order, except for the tensors whose rows the
// model keeps de-interleaved (model::whole_model_row_runs), whose order is the model's; both
// depend only on the architecture, never on the layout. A piece covers elements [begin, end)
// of the tensor and names the byte offsets in `files[file]` of its weights and of its two Adam
// moments (fp32, little-endian, contiguous). The pieces of a tensor tile [0, numel) exactly;
// parse_sharded_index refuses anything else.
//
// Index format 2 (tensor parallelism: a rank holds a block of rows and columns of a tensor):
//
//   index.json  {"format": 2, ..., "layout": {..., "tensor_parallel": 2,
//                                             "expert_tensor_parallel": 2},
//                "tensors": [{"name": ..., "shape": ...,
//                             "blocks": [[row, rows, column, columns], ...],
//                             "pieces": [[file, block, begin, end, values, exp_avg,
//                                         exp_avg_sq], ...]}, ...]}
//
// A tensor is seen as a matrix in HF order, its first dimension the rows and the others the
// columns. A block is the rectangle rows [row, row + rows) x columns [column, column +
// columns); the blocks of a tensor tile it exactly (a column-parallel piece is a block of rows,
// a row-parallel one a block of columns, a tensor no rank splits one block). A piece covers
// elements [begin, end) of its block, counted row by row (row-major in the block), with the
// byte offsets as in format 1; the pieces of each block tile it. A rank's pieces are contiguous
// runs of its own storage, so a tensor has a few blocks per TP rank (one per run of rows it
// holds) and never one entry per row. Format 1 is read by every layout too.

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
  int tensor_parallel = 1;         // format 2 only
  int expert_tensor_parallel = 1;  // format 2 only
};

// Rows [row, row + rows) x columns [column, column + columns) of a tensor seen as a matrix.
struct IndexBlock {
  std::int64_t row = 0;
  std::int64_t rows = 0;
  std::int64_t column = 0;
  std::int64_t columns = 0;
  std::int64_t numel() const { return rows * columns; }
  friend bool operator==(const IndexBlock&, const IndexBlock&) = default;
};

struct IndexPiece {
  std::int64_t file = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::uint64_t offsets[3] = {0, 0, 0};  // bytes: weights, exp_avg, exp_avg_sq
  std::int64_t block = 0;                // format 2: [begin, end) counts in blocks[block]
};

struct IndexTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<IndexPiece> pieces;  // ascending begin (format 2: ascending block, then begin)
  std::vector<IndexBlock> blocks;  // format 2; empty in format 1
  std::int64_t numel() const;
  // The matrix the blocks cut: shape[0] rows (1 for a scalar), numel / rows columns.
  std::int64_t rows() const;
  std::int64_t columns() const;
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

// Format 2 when the tensors have blocks (then every tensor has), format 1 otherwise.
std::string sharded_index_json(const ShardedIndex& index);

// Parses and checks index text of either format: the schema, every piece inside its file, the
// blocks of each tensor tiling it and the pieces tiling the tensor (format 1) or each block
// (format 2); `where` names the file in data errors.
ShardedIndex parse_sharded_index(const std::string& text, const std::string& where);

}  // namespace dyncp::train
