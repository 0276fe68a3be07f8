// Reading a sharded checkpoint (train/sharded_checkpoint.hpp) into any layout: every tensor
// the loading rank holds, as blocks of the whole tensor (one per run of rows it holds), is
// matched against the blocks of the index (format 2, or format 1's runs of the whole model's
// storage turned into blocks), and the elements they share are read from the shards.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "train/sharded_checkpoint.hpp"
#include "train/sharded_checkpoint_tensors.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t max_state_bytes = 64 * 1024;
// An index lists a few entries per tensor; far larger than any model's.
constexpr std::uintmax_t max_index_bytes = std::uintmax_t{1} << 30;
// One read covers at most this much of a shard (rows of a piece wider than the loading
// rank's, gaps included).
constexpr std::uint64_t max_read_bytes = std::uint64_t{4} << 20;

// pread exactly `bytes` at `offset`, or a data error naming the file.
void read_exactly(int fd, const fs::path& path, std::uint64_t offset, void* out,
                  std::uint64_t bytes) {
  auto* cursor = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, cursor, bytes, static_cast<off_t>(offset));
    if (got <= 0) {
      core::throw_data_error(path.string(),
                             got == 0 ? "ends before byte " + std::to_string(offset + bytes) +
                                            " that the index needs (truncated)"
                                      : std::string("read failed: ") + std::strerror(errno));
    }
    cursor += got;
    offset += static_cast<std::uint64_t>(got);
    bytes -= static_cast<std::uint64_t>(got);
  }
}

std::string read_small_file(const fs::path& path, std::uintmax_t limit, const char* what) {
  std::error_code error;
  if (!fs::is_regular_file(path, error))
    core::throw_data_error(path.string(), std::string("missing: not a ") + what);
  if (fs::file_size(path, error) > limit)
    core::throw_data_error(path.string(), std::string("too large for a ") + what);
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Format 1's pieces of `tensor` (runs of the whole model's storage order, whose rows are `runs`:
// empty = HF order) as pieces of blocks: one block per run of rows, every column.
void storage_order_to_blocks(IndexTensor& tensor, std::vector<model::HfRowRun> runs) {
  const std::int64_t columns = tensor.columns();
  if (runs.empty()) runs.push_back({0, 0, tensor.rows()});
  for (const model::HfRowRun& run : runs)
    tensor.blocks.push_back({run.hf_row, run.count, 0, columns});
  std::vector<IndexPiece> pieces;
  for (const IndexPiece& piece : tensor.pieces) {
    for (std::size_t b = 0; b < runs.size(); ++b) {
      const std::int64_t start = runs[b].row * columns, stop = start + runs[b].count * columns;
      const std::int64_t begin = std::max(piece.begin, start), end = std::min(piece.end, stop);
      if (begin >= end) continue;
      IndexPiece part = piece;
      part.block = static_cast<std::int64_t>(b);
      part.begin = begin - start;
      part.end = end - start;
      for (std::uint64_t& offset : part.offsets)
        offset += static_cast<std::uint64_t>(begin - piece.begin) * 4;
      pieces.push_back(part);
    }
  }
  tensor.pieces = std::move(pieces);
}

// Copies the elements a local block and a stored piece share from one shard into the
// destinations, a row at a time but in reads of up to max_read_bytes: straight into the
// destination when the rows are contiguous on both sides, else through a buffer.
class SharedElementsReader {
 public:
  SharedElementsReader(int fd, const fs::path& path, const IndexPiece& piece,
                       std::span<const int> parts, float* const* destinations)
      : fd_(fd), path_(path), piece_(piece), parts_(parts), destinations_(destinations) {}

  // The elements of `local` in its run [local_begin, local_end) (row-major in the block) that
  // lie in `stored`'s run [piece.begin, piece.end).
  void copy(const detail::LocalBlock& local, std::int64_t local_begin, std::int64_t local_end,
            const IndexBlock& stored) {
    const IndexBlock& l = local.block;
    const std::int64_t first_row =
        std::max(l.row + local_begin / l.columns, stored.row + piece_.begin / stored.columns);
    const std::int64_t last_row = std::min(l.row + (local_end - 1) / l.columns,
                                           stored.row + (piece_.end - 1) / stored.columns);
    for (std::int64_t row = first_row; row <= last_row; ++row) {
      const std::int64_t local_base = (row - l.row) * l.columns;
      const std::int64_t stored_base = (row - stored.row) * stored.columns;
      const std::int64_t begin =
          std::max({l.column + std::max<std::int64_t>(0, local_begin - local_base),
                    stored.column + std::max<std::int64_t>(0, piece_.begin - stored_base)});
      const std::int64_t end =
          std::min({l.column + std::min(l.columns, local_end - local_base),
                    stored.column + std::min(stored.columns, piece_.end - stored_base)});
      if (begin >= end) continue;
      add({stored_base + (begin - stored.column) - piece_.begin,
           local.storage + local_base + (begin - l.column), end - begin});
    }
    flush();
  }

 private:
  struct Row {
    std::int64_t element = 0;  // in the piece
    std::int64_t destination = 0;
    std::int64_t count = 0;
  };

  void add(const Row& row) {
    if (!batch_.empty() &&
        static_cast<std::uint64_t>(row.element + row.count - batch_.front().element) * 4 >
            max_read_bytes)
      flush();
    batch_.push_back(row);
  }

  void flush() {
    if (batch_.empty()) return;
    bool contiguous = true;
    for (std::size_t i = 1; i < batch_.size() && contiguous; ++i) {
      contiguous = batch_[i].element == batch_[i - 1].element + batch_[i - 1].count &&
                   batch_[i].destination == batch_[i - 1].destination + batch_[i - 1].count;
    }
    const Row& first = batch_.front();
    const std::int64_t span = batch_.back().element + batch_.back().count - first.element;
    for (const int part : parts_) {
      const std::uint64_t offset =
          piece_.offsets[part] + static_cast<std::uint64_t>(first.element) * 4;
      float* destination = destinations_[part];
      if (contiguous) {
        read_exactly(fd_, path_, offset, destination + first.destination,
                     static_cast<std::uint64_t>(span) * 4);
        continue;
      }
      buffer_.resize(static_cast<std::size_t>(span));
      read_exactly(fd_, path_, offset, buffer_.data(), static_cast<std::uint64_t>(span) * 4);
      for (const Row& row : batch_)
        std::copy_n(buffer_.begin() + (row.element - first.element), row.count,
                    destination + row.destination);
    }
    batch_.clear();
  }

  int fd_;
  const fs::path& path_;
  const IndexPiece& piece_;
  std::span<const int> parts_;
  float* const* destinations_;
  std::vector<Row> batch_;
  std::vector<float> buffer_;
};

bool blocks_meet(const IndexBlock& a, const IndexBlock& b) {
  return a.row < b.row + b.rows && b.row < a.row + a.rows && a.column < b.column + b.columns &&
         b.column < a.column + a.columns;
}

// The open shards of a checkpoint folder, closed on destruction.
class ShardFiles {
 public:
  ShardFiles(const fs::path& folder, const ShardedIndex& index)
      : folder_(folder), index_(index), fds_(index.files.size(), -1) {}
  ~ShardFiles() {
    for (const int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  ShardFiles(const ShardFiles&) = delete;
  ShardFiles& operator=(const ShardFiles&) = delete;

  fs::path path(std::int64_t file) const {
    return folder_ / index_.files[static_cast<std::size_t>(file)].path;
  }
  int fd(std::int64_t file) {
    int& fd = fds_[static_cast<std::size_t>(file)];
    if (fd < 0) {
      fd = ::open(path(file).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        core::throw_data_error(path(file).string(),
                               std::string("cannot open: ") + std::strerror(errno));
    }
    return fd;
  }

 private:
  const fs::path& folder_;
  const ShardedIndex& index_;
  std::vector<int> fds_;
};

// The state.json and index.json of a sharded checkpoint of `iteration`, checked.
ShardedIndex read_index(const fs::path& folder, std::int64_t iteration, LoopState& state) {
  const fs::path state_path = folder / "state.json";
  state = parse_loop_state(read_small_file(state_path, max_state_bytes, "loop state"),
                           state_path.string(), iteration);
  if (state.format != 3)
    core::throw_data_error(state_path.string(), "format " + std::to_string(state.format) +
                                                    " beside an index.json: a sharded "
                                                    "checkpoint's state.json has format 3");
  const fs::path index_path = folder / sharded_index_name;
  ShardedIndex index =
      parse_sharded_index(read_small_file(index_path, max_index_bytes, "sharded checkpoint index"),
                          index_path.string());
  if (index.iteration != iteration)
    core::throw_data_error(index_path.string(), "records iteration " +
                                                    std::to_string(index.iteration) + ", not " +
                                                    std::to_string(iteration));
  return index;
}

}  // namespace

LoopState read_sharded_checkpoint(const fs::path& folder, std::int64_t iteration,
                                  const model::Qwen3MoeParameters& parameters,
                                  const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                                  std::span<const parallel::ParameterRange> moment_ranges) {
  LoopState state;
  ShardedIndex index = read_index(folder, iteration, state);
  const fs::path index_path = folder / sharded_index_name;
  const std::vector<model::WholeModelTensor> whole = model::whole_model_tensors(parameters);
  if (index.tensors.size() != whole.size())
    core::throw_data_error(index_path.string(),
                           std::to_string(index.tensors.size()) + " tensors, but the model has " +
                               std::to_string(whole.size()) + " (does config.json match?)");

  ShardFiles files(folder, index);
  float* const parts[3] = {parameters.all_values().data<float>(), exp_avg.data<float>(),
                           exp_avg_sq.data<float>()};
  constexpr int weights[] = {0}, moments[] = {1, 2};
  for (const detail::LocalTensor& local : detail::local_tensors(parameters, whole)) {
    IndexTensor& stored = index.tensors[static_cast<std::size_t>(local.whole_index)];
    const model::WholeModelTensor& expected = whole[static_cast<std::size_t>(local.whole_index)];
    if (stored.name != expected.name || stored.shape != expected.shape)
      core::throw_data_error(index_path.string(),
                             "tensor " + std::to_string(local.whole_index) + " is '" + stored.name +
                                 "', the model expects '" + expected.name +
                                 "' of the same shape (does config.json match?)");
    if (stored.blocks.empty())
      storage_order_to_blocks(stored,
                              model::whole_model_row_runs(parameters.architecture(), stored.name));
    float* const destinations[3] = {parts[0] + local.flat_offset, parts[1] + local.flat_offset,
                                    parts[2] + local.flat_offset};
    // Every weight; the moments only where the loading optimizer keeps them (tensor storage
    // ranges).
    const auto read_range = [&](std::int64_t begin, std::int64_t end, std::span<const int> which) {
      for (const detail::LocalBlock& block : detail::local_blocks(*local.tensor)) {
        const std::int64_t first = std::max(begin, block.storage),
                           last = std::min(end, block.storage + block.block.numel());
        if (first >= last) continue;
        for (const IndexPiece& piece : stored.pieces) {
          const IndexBlock& held = stored.blocks[static_cast<std::size_t>(piece.block)];
          if (!blocks_meet(block.block, held)) continue;
          SharedElementsReader(files.fd(piece.file), files.path(piece.file), piece, which,
                               destinations)
              .copy(block, first - block.storage, last - block.storage, held);
        }
      }
    };
    read_range(0, local.numel, weights);
    for (const parallel::ParameterRange& range : moment_ranges) {
      const std::int64_t begin = std::max(local.flat_offset, range.offset);
      const std::int64_t end =
          std::min(local.flat_offset + local.numel, range.offset + range.count);
      if (begin < end) read_range(begin - local.flat_offset, end - local.flat_offset, moments);
    }
  }
  return state;
}

}  // namespace dyncp::train
