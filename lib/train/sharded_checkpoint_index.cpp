#include "train/sharded_checkpoint_index.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_text_check.hpp"

namespace dyncp::train {

namespace {

constexpr int index_format = 1;

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

SavingLayout parse_layout(const nlohmann::json& json, const std::string& where) {
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
  return layout;
}

// Each piece inside its file, the pieces tiling [0, numel).
void check_tensor(const IndexTensor& tensor, const std::vector<IndexFile>& files,
                  const std::string& where) {
  const std::string context = "tensor '" + tensor.name + "': ";
  std::int64_t covered = 0;
  for (const IndexPiece& piece : tensor.pieces) {
    if (piece.file >= static_cast<std::int64_t>(files.size()))
      core::throw_data_error(where, context + "piece names file " + std::to_string(piece.file) +
                                        " of " + std::to_string(files.size()));
    if (piece.begin != covered || piece.end <= piece.begin)
      core::throw_data_error(where, context + "pieces do not tile the tensor (a piece [" +
                                        std::to_string(piece.begin) + ", " +
                                        std::to_string(piece.end) + ") after element " +
                                        std::to_string(covered) + ")");
    const std::uint64_t bytes = static_cast<std::uint64_t>(piece.end - piece.begin) * 4;
    for (const std::uint64_t offset : piece.offsets) {
      if (offset > files[static_cast<std::size_t>(piece.file)].bytes ||
          bytes > files[static_cast<std::size_t>(piece.file)].bytes - offset)
        core::throw_data_error(where, context + "a piece's bytes lie past the end of " +
                                          files[static_cast<std::size_t>(piece.file)].path);
    }
    covered = piece.end;
  }
  if (covered != tensor.numel())
    core::throw_data_error(where, context + "pieces cover " + std::to_string(covered) + " of " +
                                      std::to_string(tensor.numel()) + " elements");
}

}  // namespace

std::int64_t IndexTensor::numel() const {
  std::int64_t count = 1;
  for (const std::int64_t dim : shape) count *= dim;
  return count;
}

std::string sharded_index_json(const ShardedIndex& index) {
  nlohmann::json files = nlohmann::json::array();
  for (const IndexFile& file : index.files)
    files.push_back({{"path", file.path}, {"bytes", file.bytes}});
  nlohmann::json tensors = nlohmann::json::array();
  for (const IndexTensor& tensor : index.tensors) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const IndexPiece& piece : tensor.pieces)
      pieces.push_back({piece.file, piece.begin, piece.end, piece.offsets[0], piece.offsets[1],
                        piece.offsets[2]});
    tensors.push_back({{"name", tensor.name}, {"shape", tensor.shape}, {"pieces", pieces}});
  }
  const SavingLayout& layout = index.layout;
  const nlohmann::json json = {{"format", index_format},
                               {"iteration", index.iteration},
                               {"dtype", "F32"},
                               {"layout",
                                {{"world_size", layout.world_size},
                                 {"data_parallel", layout.data_parallel},
                                 {"context_parallel", layout.context_parallel},
                                 {"expert_parallel", layout.expert_parallel},
                                 {"dynamic_context_parallel", layout.dynamic_context_parallel},
                                 {"distributed_optimizer", layout.distributed_optimizer}}},
                               {"files", files},
                               {"tensors", tensors}};
  return json.dump() + "\n";
}

ShardedIndex parse_sharded_index(const std::string& text, const std::string& where) {
  core::check_json_text(text, where);
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    core::throw_data_error(where, "not a JSON object: the index is damaged");
  if (field(json, "format", where, "") != index_format)
    core::throw_data_error(where, "index format " + json["format"].dump() +
                                      " is not the supported " + std::to_string(index_format));
  if (field(json, "dtype", where, "") != "F32")
    core::throw_data_error(where, "dtype " + json["dtype"].dump() + " is not \"F32\"");
  ShardedIndex index;
  index.iteration = count_field(json, "iteration", where, "");
  index.layout = parse_layout(field(json, "layout", where, ""), where);

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
    const nlohmann::json& pieces = field(entry, "pieces", where, context);
    if (!pieces.is_array()) core::throw_data_error(where, context + "\"pieces\" is not a list");
    for (const nlohmann::json& piece : pieces) {
      const bool well_formed = piece.is_array() && piece.size() == 6 &&
                               std::all_of(piece.begin(), piece.end(), [](const nlohmann::json& v) {
                                 return v.is_number_integer() && v.get<std::int64_t>() >= 0;
                               });
      if (!well_formed)
        core::throw_data_error(where, context + "piece " + piece.dump() +
                                          " is not [file, begin, end, weights, exp_avg, "
                                          "exp_avg_sq] of non-negative integers");
      tensor.pieces.push_back({piece[0].get<std::int64_t>(),
                               piece[1].get<std::int64_t>(),
                               piece[2].get<std::int64_t>(),
                               {piece[3].get<std::uint64_t>(), piece[4].get<std::uint64_t>(),
                                piece[5].get<std::uint64_t>()}});
    }
    check_tensor(tensor, index.files, where);
    index.tensors.push_back(std::move(tensor));
  }
  return index;
}

}  // namespace dyncp::train
