#include "train/hf_export_writer.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "config/model_architecture.hpp"
#include "core/error.hpp"
#include "core/output_file.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/whole_model_tensors.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

// One tensor of the export in file order. Experts: `layer`, `expert` (-1: every expert of the
// layer, fused) and `part` (per expert 0 gate, 1 up, 2 down; fused 0 gate_up, 2 down).
struct ExportTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  const model::HfTensor* held = nullptr;
  std::int64_t layer = -1;
  std::int64_t expert = -1;
  int part = 0;
  std::string expert_prefix;  // "model.layers.{i}.mlp.experts."
  bool reordered = false;     // rows kept reordered: written whole
  std::int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
  }
};

// The order and names of model::save_hf_checkpoint's export.
std::vector<ExportTensor> export_tensors(const model::Qwen3MoeParameters& parameters) {
  const auto& architecture = parameters.architecture();
  const bool fused = model::export_fuses_experts(architecture);
  std::vector<ExportTensor> tensors;
  for (const model::WholeModelTensor& tensor : model::whole_model_tensors(parameters)) {
    if (tensor.layer < 0) {
      tensors.push_back({tensor.name, tensor.shape, tensor.held, -1, -1, 0, {}, tensor.reordered});
      continue;
    }
    const std::string prefix = tensor.name.substr(0, tensor.name.find(".experts.") + 9);
    if (!fused) {
      tensors.push_back(
          {tensor.name, tensor.shape, nullptr, tensor.layer, tensor.expert, tensor.part, prefix});
      continue;
    }
    // gate_up_proj [E, 2I, h] at expert 0's gate, down_proj [E, h, I] at expert 0's down.
    if (tensor.expert != 0 || tensor.part == 1) continue;
    const bool down = tensor.part == 2;
    tensors.push_back(
        {prefix + (down ? "down_proj" : "gate_up_proj"),
         {architecture.num_experts, tensor.shape[0] * (down ? 1 : 2), tensor.shape[1]},
         nullptr,
         tensor.layer,
         -1,
         down ? 2 : 0,
         prefix});
  }
  return tensors;
}

// Elements [begin, begin + count) of one export tensor; `expert` -1 for a dense tensor.
// `split`: no rank holds it whole (tensor parallelism); the writer's TP group (experts: its
// expert-TP group), whose lowest rank is `group`, rebuilds it.
struct Piece {
  std::size_t tensor = 0;
  std::int64_t begin = 0;
  std::int64_t count = 0;
  std::int64_t expert = -1;
  bool split = false;
  int writer = 0;
  int group = -1;
};

// Dense tensors stored in HF order, and those no rank holds whole, are cut into runs of at
// most `dense_run` elements, so the largest ones (embeddings, LM head) spread over the ranks
// and no buffer holds more than a run; the others (rows kept de-interleaved) are reordered
// whole. `split_experts`: every expert is split over an expert-TP group.
std::vector<Piece> cut_pieces(const std::vector<ExportTensor>& tensors, std::int64_t num_experts,
                              std::int64_t dense_run, bool split_experts,
                              const std::vector<std::int32_t>& holds) {
  // A dense tensor is split when no rank holds it whole (holders: 2 whole, 1 a piece).
  const std::size_t stride = static_cast<std::size_t>(num_experts) + tensors.size();
  const auto split_dense = [&](std::size_t t) {
    std::int32_t most = 0;
    for (std::size_t at = static_cast<std::size_t>(num_experts) + t; at < holds.size();
         at += stride)
      most = std::max(most, holds[at]);
    return most == 1;
  };
  std::vector<Piece> pieces;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const ExportTensor& tensor = tensors[t];
    const std::int64_t numel = tensor.numel();
    if (tensor.layer >= 0 && tensor.expert < 0) {
      const std::int64_t per_expert = numel / num_experts;
      for (std::int64_t e = 0; e < num_experts; ++e)
        pieces.push_back({t, e * per_expert, per_expert, e, split_experts});
    } else if (tensor.layer < 0 && (!tensor.reordered || split_dense(t))) {
      const bool split = split_dense(t);
      for (std::int64_t begin = 0; begin < numel; begin += dense_run)
        pieces.push_back({t, begin, std::min(dense_run, numel - begin), -1, split});
    } else {
      const bool expert = tensor.layer >= 0;
      pieces.push_back({t, 0, numel, expert ? tensor.expert : -1, expert && split_experts});
    }
  }
  return pieces;
}

// The run length: about an eighth of a rank's share of the dense elements, at least 4 Ki.
std::int64_t dense_run_for(const std::vector<ExportTensor>& tensors, int world_size) {
  std::int64_t dense = 0;
  for (const ExportTensor& tensor : tensors)
    if (tensor.layer < 0) dense += tensor.numel();
  return std::max<std::int64_t>(std::int64_t{1} << 12, dense / (8 * world_size) + 1);
}

// What every rank holds: holds[rank * (E + T) + e] != 0 when `rank` holds expert e (its EP
// slice), holds[rank * (E + T) + E + t] when it holds export tensor t (its pipeline stage's
// tensors: a layer's, the embedding, the head): 2 whole, 1 a tensor-parallel piece of it.
std::vector<std::int32_t> holders(dist::Comm& world, const model::Qwen3MoeParameters& parameters,
                                  const std::vector<ExportTensor>& tensors) {
  const std::int64_t experts = parameters.architecture().num_experts;
  std::vector<std::int32_t> own(static_cast<std::size_t>(experts) + tensors.size());
  for (std::int64_t e = 0; e < experts; ++e)
    own[static_cast<std::size_t>(e)] = parameters.expert_range().holds(e, experts) ? 1 : 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const ExportTensor& tensor = tensors[t];
    const bool held = tensor.layer >= 0 ? parameters.position_of_layer(tensor.layer) >= 0
                                        : tensor.held != nullptr;
    const bool whole = tensor.layer >= 0 || (held && tensor.held->holds_whole());
    own[static_cast<std::size_t>(experts) + t] = held ? (whole ? 2 : 1) : 0;
  }
  std::vector<std::int32_t> all(own.size() * static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const std::int32_t>(own), std::span<std::int32_t>(all));
  return all;
}

// Every rank's TP and expert-TP groups, named by their lowest world rank: [2 r] and [2 r + 1]
// (a rank's own rank where it has no such group).
std::vector<std::int32_t> group_names(dist::Comm& world, const ExportGroups& groups) {
  // The lowest rank as a max: -rank.
  std::int32_t own[2] = {-world.rank(), -world.rank()};
  dist::Comm* group_of[2] = {groups.tensor_parallel, groups.expert_tensor_parallel};
  for (int k = 0; k < 2; ++k) {
    if (group_of[k] != nullptr)
      group_of[k]->all_reduce(&own[k], &own[k], 1, core::DType::i32, dist::ReduceOp::max);
    own[k] = -own[k];
  }
  std::vector<std::int32_t> all(2 * static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const std::int32_t>(own, 2), std::span<std::int32_t>(all));
  return all;
}

// Each piece to the least loaded rank holding it or a piece of it (ties: the lowest rank):
// the constrained expert pieces first in file order, then the dense ones, largest first. A
// split piece goes with its writer's group (`names`, group_names). The same on every rank: it
// depends only on the model and every rank's slice and groups.
void assign_writers(std::vector<Piece>& pieces, const std::vector<std::int32_t>& holds,
                    const std::vector<std::int32_t>& names, std::int64_t num_experts,
                    std::size_t num_tensors, int world_size, std::size_t value_bytes) {
  std::vector<std::uint64_t> load(static_cast<std::size_t>(world_size), 0);
  const std::size_t stride = static_cast<std::size_t>(num_experts) + num_tensors;
  const auto place = [&](Piece& piece) {
    int best = -1;
    for (int r = 0; r < world_size; ++r) {
      const std::size_t base = static_cast<std::size_t>(r) * stride;
      if (holds[base + static_cast<std::size_t>(num_experts) + piece.tensor] == 0) continue;
      if (piece.expert >= 0 && holds[base + static_cast<std::size_t>(piece.expert)] == 0) continue;
      if (best < 0 || load[static_cast<std::size_t>(r)] < load[static_cast<std::size_t>(best)])
        best = r;
    }
    if (best < 0)
      core::throw_runtime_error(
          "HF export: no rank holds tensor " + std::to_string(piece.tensor) +
          (piece.expert >= 0 ? " expert " + std::to_string(piece.expert) : std::string()));
    piece.writer = best;
    if (piece.split)
      piece.group = names[2 * static_cast<std::size_t>(best) + (piece.expert >= 0 ? 1 : 0)];
    load[static_cast<std::size_t>(best)] += static_cast<std::uint64_t>(piece.count) * value_bytes;
  };
  std::vector<std::size_t> dense;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].expert >= 0)
      place(pieces[i]);
    else
      dense.push_back(i);
  }
  std::stable_sort(dense.begin(), dense.end(),
                   [&](std::size_t a, std::size_t b) { return pieces[a].count > pieces[b].count; });
  for (const std::size_t i : dense) place(pieces[i]);
}

// The elements of HF-order [begin, begin + count) of `tensor` that `value` holds (its piece:
// rows and a column range) into out[0, count); the others are left untouched.
void read_hf_range(const model::HfTensor& tensor, const core::Tensor& value, std::int64_t begin,
                   std::int64_t count, float* out) {
  const std::int64_t columns = value.numel() / std::max<std::int64_t>(value.size(0), 1);
  const std::int64_t hf_columns = tensor.hf_numel() / std::max<std::int64_t>(tensor.hf_shape[0], 1);
  const std::int64_t end = begin + count;
  tensor.for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t rows) {
    const std::int64_t first = std::max(hf_row, begin / hf_columns);
    const std::int64_t last = std::min(hf_row + rows, (end - 1) / hf_columns + 1);
    for (std::int64_t r = first; r < last; ++r) {
      const std::int64_t held = r * hf_columns + tensor.hf_column_first;  // the row's first
      const std::int64_t from = std::max(held, begin), to = std::min(held + columns, end);
      if (from >= to) continue;
      const std::int64_t local = (row + r - hf_row) * columns + (from - held);
      if (value.dtype() == core::DType::f32) {
        std::copy_n(value.data<float>() + local, to - from, out + (from - begin));
      } else {
        const double* source = value.data<double>() + local;
        std::transform(source, source + (to - from), out + (from - begin),
                       [](double x) { return static_cast<float>(x); });
      }
    }
  });
}

// This rank's values of a piece in HF order; a split piece's elements other ranks hold are
// -0.0 (its group's sum fills them).
void fill_piece(const Piece& piece, const ExportTensor& tensor,
                const std::map<std::string, const model::HfTensor*>& local,
                std::vector<float>& values) {
  values.resize(static_cast<std::size_t>(piece.count));
  if (piece.split) std::fill(values.begin(), values.end(), -0.0f);
  if (tensor.layer < 0) {
    const core::Tensor& value = tensor.held->value;
    if (piece.split) {
      read_hf_range(*tensor.held, value, piece.begin, piece.count, values.data());
    } else if (piece.begin == 0 && piece.count == value.numel()) {
      tensor.held->read_hf_order(value, values.data());
    } else if (value.dtype() == core::DType::f32) {  // a run of a tensor stored in HF order
      std::copy_n(value.data<float>() + piece.begin, piece.count, values.begin());
    } else {
      const double* from = value.data<double>() + piece.begin;
      std::transform(from, from + piece.count, values.begin(),
                     [](double x) { return static_cast<float>(x); });
    }
    return;
  }
  // One expert's tensors, concatenated: gate then up for a fused gate_up_proj.
  std::vector<std::string> names;
  const std::string expert = tensor.expert_prefix + std::to_string(piece.expert) + ".";
  if (tensor.expert >= 0)
    names.push_back(tensor.name);
  else if (tensor.part == 2)
    names.push_back(expert + "down_proj.weight");
  else
    names = {expert + "gate_proj.weight", expert + "up_proj.weight"};
  float* out = values.data();
  for (const std::string& name : names) {
    const auto found = local.find(name);
    DYNCP_CHECK(found != local.end(), "the writer of a piece holds " + name);
    found->second->read_hf_order(found->second->value, out);
    out += found->second->hf_numel();
  }
  DYNCP_CHECK(out == values.data() + piece.count, "a piece's sources fill it exactly");
}

[[noreturn]] void throw_errno(const fs::path& path, const char* what) {
  core::throw_runtime_error(std::string(what) + " '" + path.string() +
                            "' failed: " + std::strerror(errno));
}

void write_at(int fd, const fs::path& path, const fs::path& named, const void* data,
              std::size_t bytes, std::uint64_t offset) {
  core::check_injected_write_fault(named, bytes);
  const auto* from = static_cast<const std::uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t done = ::pwrite(fd, from, bytes, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) throw_errno(path, "writing");
    from += done;
    bytes -= static_cast<std::size_t>(done);
    offset += static_cast<std::uint64_t>(done);
  }
}

fs::path partial_path(const fs::path& folder, const model::SafetensorsFilePlan& file) {
  return folder / (file.name + ".partial");
}

// The header of `file` at the start of its partial file, sized to the whole file.
void create_file(const fs::path& folder, const model::SafetensorsFilePlan& file) {
  const fs::path path = partial_path(folder, file);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(path, "opening");
  try {
    write_at(fd, path, folder / file.name, file.head.data(), file.head.size(), 0);
    if (::ftruncate(fd, static_cast<off_t>(file.bytes)) != 0) throw_errno(path, "sizing");
    if (::fsync(fd) != 0) throw_errno(path, "syncing");
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw_errno(path, "closing");
}

// The files this rank writes into, opened on first use and synced and closed at the end.
class OpenFiles {
 public:
  OpenFiles(const fs::path& folder, const std::vector<model::SafetensorsFilePlan>& files)
      : folder_(folder), files_(files) {}
  ~OpenFiles() {
    for (const auto& [k, fd] : fds_)
      if (fd >= 0) ::close(fd);
  }
  OpenFiles(const OpenFiles&) = delete;
  OpenFiles& operator=(const OpenFiles&) = delete;

  int fd(std::size_t k) {
    auto found = fds_.find(k);
    if (found == fds_.end()) {
      const fs::path path = partial_path(folder_, files_[k]);
      const int opened = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (opened < 0) throw_errno(path, "opening");
      found = fds_.emplace(k, opened).first;
    }
    return found->second;
  }
  void sync_and_close() {
    for (auto& [k, fd] : fds_) {
      const fs::path path = partial_path(folder_, files_[k]);
      const int closing = fd;
      fd = -1;
      if (::fsync(closing) != 0) {
        ::close(closing);
        throw_errno(path, "syncing");
      }
      if (::close(closing) != 0) throw_errno(path, "closing");
    }
  }

 private:
  const fs::path& folder_;
  const std::vector<model::SafetensorsFilePlan>& files_;
  std::map<std::size_t, int> fds_;  // file index -> fd
};

// Writes this rank's pieces and takes part in its groups' rebuilds of split pieces; returns
// the bytes written. A failure stops this rank's writing, not its part in the rebuilds (the
// other members are waiting in them): it is thrown once every rebuild ran.
std::uint64_t write_pieces(const fs::path& folder, const std::vector<ExportTensor>& tensors,
                           const std::vector<model::SafetensorsFilePlan>& files,
                           const std::vector<std::size_t>& file_of,
                           const std::vector<Piece>& pieces, int rank,
                           const std::vector<std::int32_t>& names, const ExportGroups& groups,
                           const model::Qwen3MoeParameters& parameters, model::StoredDType dtype) {
  std::map<std::string, const model::HfTensor*> local;
  for (const model::HfTensor& tensor : parameters.hf_tensors())
    if (tensor.is_expert) local[tensor.name] = &tensor;
  OpenFiles open(folder, files);
  std::uint64_t written = 0;
  std::vector<float> values;
  std::vector<std::uint8_t> bytes;
  const std::size_t value_bytes = model::stored_dtype_size(dtype);
  std::exception_ptr failure;
  for (const Piece& piece : pieces) {
    const bool expert_group = piece.expert >= 0;
    const bool member =
        piece.split &&
        names[2 * static_cast<std::size_t>(rank) + (expert_group ? 1 : 0)] == piece.group;
    if (piece.writer != rank && !member) continue;
    const bool writes = piece.writer == rank && !failure;
    try {
      if (member || writes) fill_piece(piece, tensors[piece.tensor], local, values);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    if (member) {
      values.resize(static_cast<std::size_t>(piece.count));
      (expert_group ? groups.expert_tensor_parallel : groups.tensor_parallel)
          ->all_reduce(values.data(), values.data(), values.size(), core::DType::f32,
                       dist::ReduceOp::sum);
    }
    if (!writes || failure) continue;
    try {
      const std::size_t k = file_of[piece.tensor];
      const model::SafetensorsFilePlan& file = files[k];
      model::encode_safetensors_values(bytes, values, dtype);
      const std::uint64_t offset = file.offsets[piece.tensor - file.first] +
                                   static_cast<std::uint64_t>(piece.begin) * value_bytes;
      write_at(open.fd(k), partial_path(folder, file), folder / file.name, bytes.data(),
               bytes.size(), offset);
      written += bytes.size();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  open.sync_and_close();
  return written;
}

// Collective: the failure of the lowest failing rank on every rank ("" when none failed).
std::string agree_on_failure(dist::Comm& world, const std::string& failure) {
  // The lowest failing rank as a max: size - rank.
  std::int32_t lowest = failure.empty() ? 0 : world.size() - world.rank();
  world.all_reduce(&lowest, &lowest, 1, core::DType::i32, dist::ReduceOp::max);
  if (lowest == 0) return {};
  const int first = world.size() - lowest;
  std::int64_t length = world.rank() == first ? static_cast<std::int64_t>(failure.size()) : 0;
  world.broadcast(std::span<std::int64_t>(&length, 1), first);
  std::string text =
      world.rank() == first ? failure : std::string(static_cast<std::size_t>(length), ' ');
  world.broadcast(text.data(), text.size(), core::DType::u8, first);
  return text;
}

// Runs `step` and returns its failure, named by rank ("" when it succeeded).
template <typename Step>
std::string attempt(int rank, Step&& step) {
  try {
    step();
  } catch (const std::exception& error) {  // core::Error or std::filesystem's
    return "rank " + std::to_string(rank) + ": " + error.what();
  }
  return {};
}

void write_text(const fs::path& path, const std::string& text) {
  core::OutputFile file(path);
  file.write(text);
  file.close();
}

}  // namespace

std::uint64_t write_hf_weights_in_parallel(dist::Comm& world, const fs::path& folder,
                                           const model::Qwen3MoeParameters& parameters,
                                           model::StoredDType dtype, std::uint64_t max_shard_bytes,
                                           const ExportGroups& groups) {
  const std::int64_t num_experts = parameters.architecture().num_experts;
  const model::TensorParallelShape& shape = parameters.tensor_parallel();
  if ((shape.size > 1 && groups.tensor_parallel == nullptr) ||
      (shape.expert_size > 1 && groups.expert_tensor_parallel == nullptr))
    core::throw_runtime_error(
        "HF export: parameters holding tensor-parallel pieces need their TP and expert-TP "
        "groups to rebuild the tensors (ExportGroups)");
  const std::vector<ExportTensor> tensors = export_tensors(parameters);
  std::vector<model::TensorToWrite> listed;
  for (const ExportTensor& tensor : tensors) listed.push_back({tensor.name, tensor.shape, {}, {}});
  const std::vector<model::SafetensorsFilePlan> files =
      model::plan_safetensors_folder(listed, dtype, max_shard_bytes);
  std::vector<std::size_t> file_of(tensors.size());
  for (std::size_t k = 0; k < files.size(); ++k)
    for (std::size_t t = files[k].first; t < files[k].end; ++t) file_of[t] = k;
  const std::vector<std::int32_t> held = holders(world, parameters, tensors);
  std::vector<Piece> pieces = cut_pieces(tensors, num_experts, dense_run_for(tensors, world.size()),
                                         shape.expert_size > 1, held);
  const std::vector<std::int32_t> names = group_names(world, groups);
  assign_writers(pieces, held, names, num_experts, tensors.size(), world.size(),
                 model::stored_dtype_size(dtype));

  const int rank = world.rank();
  const auto fail = [&](const std::string& failure) {
    if (rank == 0) {
      std::error_code ignored;
      for (const auto& file : files) fs::remove(partial_path(folder, file), ignored);
    }
    core::throw_runtime_error("the HF export to " + folder.string() +
                              " failed, no file of it was published: " + failure);
  };
  std::string failure = attempt(rank, [&] {
    if (rank == 0) fs::create_directories(folder);
  });
  if (const std::string agreed = agree_on_failure(world, failure); !agreed.empty()) fail(agreed);
  failure = attempt(rank, [&] {
    for (std::size_t k = static_cast<std::size_t>(rank); k < files.size();
         k += static_cast<std::size_t>(world.size()))
      create_file(folder, files[k]);
  });
  if (const std::string agreed = agree_on_failure(world, failure); !agreed.empty()) fail(agreed);
  std::uint64_t written = 0;
  failure = attempt(rank, [&] {
    written = write_pieces(folder, tensors, files, file_of, pieces, rank, names, groups, parameters,
                           dtype);
  });
  if (!failure.empty()) spdlog::error("HF export to {}: {}", folder.string(), failure);
  if (const std::string agreed = agree_on_failure(world, failure); !agreed.empty()) fail(agreed);
  failure = attempt(rank, [&] {
    if (rank != 0) return;
    for (const auto& file : files) fs::rename(partial_path(folder, file), folder / file.name);
    if (files.size() > 1)
      write_text(folder / "model.safetensors.index.json",
                 model::safetensors_index_json(listed, files, dtype));
    write_text(folder / "config.json", config::to_hf_config_json(parameters.architecture()) + "\n");
  });
  if (const std::string agreed = agree_on_failure(world, failure); !agreed.empty()) fail(agreed);
  for (std::size_t k = static_cast<std::size_t>(rank); k < files.size();
       k += static_cast<std::size_t>(world.size()))
    written += files[k].head.size();
  return written;
}

}  // namespace dyncp::train
