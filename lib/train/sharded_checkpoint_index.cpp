#include "train/sharded_checkpoint_index.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_text_check.hpp"

namespace dyncp::train {

namespace {

constexpr int whole_tensor_format = 1;  // pieces are runs of the whole model's storage order
constexpr int block_format = 2;         // pieces are runs of blocks (tensor parallelism)

// A listed path must stay inside the folder: relative, no "..", no empty parts.
bool safe_relative_path(const std::string& text) {
  if (text.empty() || text.front() == '/') return false;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('/', start), text.size());
    const std::string part = text.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

const nlohmann::json& field(const nlohmann::json& object, const char* name,
                            const std::string& where, const std::string& context) {
  if (!object.is_object() || !object.contains(name))
    core::throw_data_error(where, context + "no \"" + name + "\"");
  return object[name];
}

std::int64_t count_field(const nlohmann::json& object, const char* name, const std::string& where,
                         const std::string& context) {
  const nlohmann::json& value = field(object, name, where, context);
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0)
    core::throw_data_error(
        where, context + "\"" + name + "\" " + value.dump() + " is not a non-negative integer");
  return value.get<std::int64_t>();
}

SavingLayout parse_layout(const nlohmann::json& json, int format, const std::string& where) {
  const std::string context = "layout: ";
  SavingLayout layout;
  const auto positive = [&](const char* name) {
    const std::int64_t value = count_field(json, name, where, context);
    if (value < 1) core::throw_data_error(where, context + "\"" + name + "\" must be >= 1");
    return static_cast<int>(value);
  };
  layout.world_size = positive("world_size");
  layout.data_parallel = positive("data_parallel");
  layout.context_parallel = positive("context_parallel");
  layout.expert_parallel = positive("expert_parallel");
  for (const char* name : {"dynamic_context_parallel", "distributed_optimizer"}) {
    if (!field(json, name, where, context).is_boolean())
      core::throw_data_error(where, context + "\"" + name + "\" is not a boolean");
  }
  layout.dynamic_context_parallel = json["dynamic_context_parallel"].get<bool>();
  layout.distributed_optimizer = json["distributed_optimizer"].get<bool>();
  if (format == block_format) {
    layout.tensor_parallel = positive("tensor_parallel");
    layout.expert_tensor_parallel = positive("expert_tensor_parallel");
  }
  return layout;
}

void check_piece_in_file(const IndexPiece& piece, const std::vector<IndexFile>& files,
                         const std::string& where, const std::string& context) {
  if (piece.file >= static_cast<std::int64_t>(files.size()))
    core::throw_data_error(where, context + "piece names file " + std::to_string(piece.file) +
                                      " of " + std::to_string(files.size()));
  const IndexFile& file = files[static_cast<std::size_t>(piece.file)];
  const std::uint64_t bytes = static_cast<std::uint64_t>(piece.end - piece.begin) * 4;
  for (const std::uint64_t offset : piece.offsets) {
    if (offset > file.bytes || bytes > file.bytes - offset)
      core::throw_data_error(where, context + "a piece's bytes lie past the end of " + file.path);
  }
}

// `pieces` (ascending begin) tile [0, numel); `what` names the range in errors.
void check_tiling(const std::vector<const IndexPiece*>& pieces, std::int64_t numel,
                  const std::string& where, const std::string& context) {
  std::int64_t covered = 0;
  for (const IndexPiece* piece : pieces) {
    if (piece->begin != covered || piece->end <= piece->begin)
      core::throw_data_error(where, context + "pieces do not tile the tensor (a piece [" +
                                        std::to_string(piece->begin) + ", " +
                                        std::to_string(piece->end) + ") after element " +
                                        std::to_string(covered) + ")");
    covered = piece->end;
  }
  if (covered != numel)
    core::throw_data_error(where, context + "pieces cover " + std::to_string(covered) + " of " +
                                      std::to_string(numel) + " elements");
}

// The blocks inside the matrix, none overlapping another, their areas adding up to it: a
// sweep down the rows keeping the column intervals of the blocks that cross the current row.
void check_blocks(const IndexTensor& tensor, const std::string& where, const std::string& context) {
  const std::int64_t rows = tensor.rows(), columns = tensor.columns();
  std::int64_t area = 0;
  struct Event {
    std::int64_t row;
    bool opens;
    std::size_t block;
  };
  std::vector<Event> events;
  for (std::size_t b = 0; b < tensor.blocks.size(); ++b) {
    const IndexBlock& block = tensor.blocks[b];
    if (block.rows < 1 || block.columns < 1 || block.row + block.rows > rows ||
        block.column + block.columns > columns)
      core::throw_data_error(
          where, context + "block [" + std::to_string(block.row) + ", " +
                     std::to_string(block.rows) + ", " + std::to_string(block.column) + ", " +
                     std::to_string(block.columns) + "] is not inside its " + std::to_string(rows) +
                     " x " + std::to_string(columns) + " matrix");
    area += block.numel();
    events.push_back({block.row, true, b});
    events.push_back({block.row + block.rows, false, b});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.row != b.row ? a.row < b.row : !a.opens && b.opens;  // close before open
  });
  std::map<std::int64_t, std::int64_t> open;  // column -> end column of the crossing blocks
  for (const Event& event : events) {
    const IndexBlock& block = tensor.blocks[event.block];
    if (!event.opens) {
      open.erase(block.column);
      continue;
    }
    const auto next = open.lower_bound(block.column);
    const bool overlaps = (next != open.end() && next->first < block.column + block.columns) ||
                          (next != open.begin() && std::prev(next)->second > block.column);
    if (overlaps)
      core::throw_data_error(where, context + "blocks overlap (near row " +
                                        std::to_string(event.row) + ", column " +
                                        std::to_string(block.column) + ")");
    open.emplace(block.column, block.column + block.columns);
  }
  if (area != tensor.numel())
    core::throw_data_error(where, context + "blocks cover " + std::to_string(area) + " of " +
                                      std::to_string(tensor.numel()) + " elements");
}

// Each piece inside its file; the pieces tiling the tensor (format 1) or, with the blocks
// tiling the tensor, each block (format 2).
void check_tensor(const IndexTensor& tensor, const std::vector<IndexFile>& files,
                  const std::string& where) {
  const std::string context = "tensor '" + tensor.name + "': ";
  for (const IndexPiece& piece : tensor.pieces) check_piece_in_file(piece, files, where, context);
  if (tensor.blocks.empty()) {
    std::vector<const IndexPiece*> pieces;
    for (const IndexPiece& piece : tensor.pieces) pieces.push_back(&piece);
    check_tiling(pieces, tensor.numel(), where, context);
    return;
  }
  check_blocks(tensor, where, context);
  std::vector<std::vector<const IndexPiece*>> per_block(tensor.blocks.size());
  for (const IndexPiece& piece : tensor.pieces) {
    if (piece.block < 0 || piece.block >= static_cast<std::int64_t>(tensor.blocks.size()))
      core::throw_data_error(where, context + "piece names block " + std::to_string(piece.block) +
                                        " of " + std::to_string(tensor.blocks.size()));
    per_block[static_cast<std::size_t>(piece.block)].push_back(&piece);
  }
  for (std::size_t b = 0; b < per_block.size(); ++b) {
    std::sort(per_block[b].begin(), per_block[b].end(),
              [](const IndexPiece* x, const IndexPiece* y) { return x->begin < y->begin; });
    check_tiling(per_block[b], tensor.blocks[b].numel(), where,
                 context + "block " + std::to_string(b) + ": ");
  }
}

// One entry of "pieces": [file, begin, end, w, m1, m2] (format 1) or [file, block, begin, end,
// w, m1, m2] (format 2).
IndexPiece parse_piece(const nlohmann::json& piece, int format, const std::string& where,
                       const std::string& context) {
  const std::size_t fields = format == block_format ? 7 : 6;
  const bool well_formed = piece.is_array() && piece.size() == fields &&
                           std::all_of(piece.begin(), piece.end(), [](const nlohmann::json& v) {
                             return v.is_number_integer() && v.get<std::int64_t>() >= 0;
                           });
  if (!well_formed)
    core::throw_data_error(where, context + "piece " + piece.dump() + " is not [file, " +
                                      (format == block_format ? "block, " : "") +
                                      "begin, end, weights, exp_avg, exp_avg_sq] of "
                                      "non-negative integers");
  const std::size_t at = fields - 6;  // the fields after the block
  IndexPiece parsed{piece[0].get<std::int64_t>(),
                    piece[at + 1].get<std::int64_t>(),
                    piece[at + 2].get<std::int64_t>(),
                    {piece[at + 3].get<std::uint64_t>(), piece[at + 4].get<std::uint64_t>(),
                     piece[at + 5].get<std::uint64_t>()},
                    format == block_format ? piece[1].get<std::int64_t>() : 0};
  return parsed;
}

std::vector<IndexBlock> parse_blocks(const nlohmann::json& blocks, const std::string& where,
                                     const std::string& context) {
  if (!blocks.is_array()) core::throw_data_error(where, context + "\"blocks\" is not a list");
  std::vector<IndexBlock> parsed;
  for (const nlohmann::json& block : blocks) {
    const bool well_formed = block.is_array() && block.size() == 4 &&
                             std::all_of(block.begin(), block.end(), [](const nlohmann::json& v) {
                               return v.is_number_integer() && v.get<std::int64_t>() >= 0;
                             });
    if (!well_formed)
      core::throw_data_error(where, context + "block " + block.dump() +
                                        " is not [row, rows, column, columns] of non-negative "
                                        "integers");
    parsed.push_back({block[0].get<std::int64_t>(), block[1].get<std::int64_t>(),
                      block[2].get<std::int64_t>(), block[3].get<std::int64_t>()});
  }
  return parsed;
}

}  // namespace

std::int64_t IndexTensor::numel() const {
  std::int64_t count = 1;
  for (const std::int64_t dim : shape) count *= dim;
  return count;
}

std::int64_t IndexTensor::rows() const {
  return shape.empty() ? 1 : shape[0];
}

std::int64_t IndexTensor::columns() const {
  return numel() / std::max<std::int64_t>(rows(), 1);
}

std::string sharded_index_json(const ShardedIndex& index) {
  const bool blocks = std::any_of(index.tensors.begin(), index.tensors.end(),
                                  [](const IndexTensor& tensor) { return !tensor.blocks.empty(); });
  nlohmann::json files = nlohmann::json::array();
  for (const IndexFile& file : index.files)
    files.push_back({{"path", file.path}, {"bytes", file.bytes}});
  nlohmann::json tensors = nlohmann::json::array();
  for (const IndexTensor& tensor : index.tensors) {
    DYNCP_CHECK(tensor.blocks.empty() != blocks, "every tensor of a format-2 index has blocks");
    nlohmann::json pieces = nlohmann::json::array();
    for (const IndexPiece& piece : tensor.pieces) {
      if (blocks)
        pieces.push_back({piece.file, piece.block, piece.begin, piece.end, piece.offsets[0],
                          piece.offsets[1], piece.offsets[2]});
      else
        pieces.push_back({piece.file, piece.begin, piece.end, piece.offsets[0], piece.offsets[1],
                          piece.offsets[2]});
    }
    nlohmann::json entry = {{"name", tensor.name}, {"shape", tensor.shape}};
    if (blocks) {
      nlohmann::json list = nlohmann::json::array();
      for (const IndexBlock& block : tensor.blocks)
        list.push_back({block.row, block.rows, block.column, block.columns});
      entry["blocks"] = list;
    }
    entry["pieces"] = pieces;
    tensors.push_back(entry);
  }
  const SavingLayout& layout = index.layout;
  nlohmann::json saving = {{"world_size", layout.world_size},
                           {"data_parallel", layout.data_parallel},
                           {"context_parallel", layout.context_parallel},
                           {"expert_parallel", layout.expert_parallel},
                           {"dynamic_context_parallel", layout.dynamic_context_parallel},
                           {"distributed_optimizer", layout.distributed_optimizer}};
  if (blocks) {
    saving["tensor_parallel"] = layout.tensor_parallel;
    saving["expert_tensor_parallel"] = layout.expert_tensor_parallel;
  }
  const nlohmann::json json = {{"format", blocks ? block_format : whole_tensor_format},
                               {"iteration", index.iteration},
                               {"dtype", "F32"},
                               {"layout", saving},
                               {"files", files},
                               {"tensors", tensors}};
  return json.dump() + "\n";
}

ShardedIndex parse_sharded_index(const std::string& text, const std::string& where) {
  core::check_json_text(text, where);
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    core::throw_data_error(where, "not a JSON object: the index is damaged");
  const nlohmann::json& format_field = field(json, "format", where, "");
  if (format_field != whole_tensor_format && format_field != block_format)
    core::throw_data_error(where, "index format " + format_field.dump() +
                                      " is not one of the "
                                      "supported 1 and 2 (written by a newer version?)");
  const int format = format_field.get<int>();
  if (field(json, "dtype", where, "") != "F32")
    core::throw_data_error(where, "dtype " + json["dtype"].dump() + " is not \"F32\"");
  ShardedIndex index;
  index.iteration = count_field(json, "iteration", where, "");
  index.layout = parse_layout(field(json, "layout", where, ""), format, where);

  const nlohmann::json& files = field(json, "files", where, "");
  if (!files.is_array() || files.empty()) core::throw_data_error(where, "\"files\" is not a list");
  for (const nlohmann::json& file : files) {
    const nlohmann::json& path = field(file, "path", where, "files: ");
    if (!path.is_string() || !safe_relative_path(path.get<std::string>()))
      core::throw_data_error(where, "files: path " + path.dump() + " leaves the checkpoint folder");
    index.files.push_back({path.get<std::string>(), static_cast<std::uint64_t>(count_field(
                                                        file, "bytes", where, "files: "))});
  }

  const nlohmann::json& tensors = field(json, "tensors", where, "");
  if (!tensors.is_array()) core::throw_data_error(where, "\"tensors\" is not a list");
  index.tensors.reserve(tensors.size());
  for (const nlohmann::json& entry : tensors) {
    IndexTensor tensor;
    const nlohmann::json& name = field(entry, "name", where, "tensors: ");
    if (!name.is_string()) core::throw_data_error(where, "tensors: a name is not a string");
    tensor.name = name.get<std::string>();
    const std::string context = "tensor '" + tensor.name + "': ";
    const nlohmann::json& shape = field(entry, "shape", where, context);
    if (!shape.is_array()) core::throw_data_error(where, context + "\"shape\" is not a list");
    for (const nlohmann::json& dim : shape) {
      if (!dim.is_number_integer() || dim.get<std::int64_t>() < 1)
        core::throw_data_error(where, context + "shape " + shape.dump() + " is not positive");
      tensor.shape.push_back(dim.get<std::int64_t>());
    }
    if (format == block_format)
      tensor.blocks = parse_blocks(field(entry, "blocks", where, context), where, context);
    const nlohmann::json& pieces = field(entry, "pieces", where, context);
    if (!pieces.is_array()) core::throw_data_error(where, context + "\"pieces\" is not a list");
    for (const nlohmann::json& piece : pieces)
      tensor.pieces.push_back(parse_piece(piece, format, where, context));
    check_tensor(tensor, index.files, where);
    index.tensors.push_back(std::move(tensor));
  }
  return index;
}

}  // namespace dyncp::train
