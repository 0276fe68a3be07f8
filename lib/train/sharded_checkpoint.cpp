#include "train/sharded_checkpoint.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <unordered_map>

#include "config/model_architecture.hpp"
#include "core/error.hpp"
#include "core/output_file.hpp"
#include "model/whole_model_tensors.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t max_state_bytes = 64 * 1024;
// An index lists a few entries per tensor; far larger than any model's.
constexpr std::uintmax_t max_index_bytes = std::uintmax_t{1} << 30;

// Every tensor the parameters hold, by where it sits in all_values().
struct LocalTensor {
  std::int64_t flat_offset = 0;
  std::int64_t numel = 0;
  std::int64_t whole_index = 0;
  const model::HfTensor* tensor = nullptr;
};

std::int64_t flat_offset_of(const model::Qwen3MoeParameters& parameters,
                            const model::HfTensor& tensor) {
  return static_cast<const float*>(tensor.value.raw_data()) -
         static_cast<const float*>(parameters.all_values().raw_data());
}

std::vector<LocalTensor> local_tensors(const model::Qwen3MoeParameters& parameters,
                                       const std::vector<model::WholeModelTensor>& whole) {
  std::unordered_map<std::string, std::int64_t> by_name;
  for (std::size_t i = 0; i < whole.size(); ++i)
    by_name.emplace(whole[i].name, static_cast<std::int64_t>(i));
  std::vector<LocalTensor> tensors;
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    const auto found = by_name.find(tensor.name);
    DYNCP_CHECK(found != by_name.end(), "every held tensor is one of the whole model's");
    tensors.push_back(
        {flat_offset_of(parameters, tensor), tensor.value.numel(), found->second, &tensor});
  }
  std::sort(tensors.begin(), tensors.end(), [](const LocalTensor& a, const LocalTensor& b) {
    return a.flat_offset < b.flat_offset;
  });
  return tensors;
}

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

// Every rank's pieces on rank 0 as [tensor, begin, end, rank] records (pieces' byte offsets
// follow from their order in the rank's file, so they need not travel).
std::vector<std::int64_t> gather_pieces(dist::Comm& world, const RankShard& shard) {
  std::vector<std::int64_t> mine;
  mine.reserve(shard.pieces.size() * 3);
  for (const RankPiece& piece : shard.pieces) {
    mine.push_back(piece.tensor);
    mine.push_back(piece.begin);
    mine.push_back(piece.end);
  }
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world.size()));
  const std::int64_t own = static_cast<std::int64_t>(mine.size());
  world.all_gather(std::span<const std::int64_t>(&own, 1), std::span<std::int64_t>(counts));
  std::vector<std::size_t> recv_counts(counts.begin(), counts.end());
  std::size_t total = 0;
  for (const std::size_t count : recv_counts) total += count;
  std::vector<std::int64_t> all(total);
  world.all_gather_v(mine.data(), mine.size(), all.data(), recv_counts, core::DType::i64);
  // The counts say where each rank's records start: add the rank to each.
  std::vector<std::int64_t> records;
  records.reserve(total / 3 * 4);
  std::size_t at = 0;
  for (int rank = 0; rank < world.size(); ++rank) {
    for (std::size_t i = 0; i < recv_counts[static_cast<std::size_t>(rank)]; i += 3, at += 3) {
      records.insert(records.end(), {all[at], all[at + 1], all[at + 2], rank});
    }
  }
  return records;
}

ShardedIndex build_index(const std::vector<model::WholeModelTensor>& whole,
                         const std::vector<std::int64_t>& records,
                         const std::vector<std::uint64_t>& file_elements, std::int64_t iteration,
                         const SavingLayout& layout) {
  ShardedIndex index;
  index.iteration = iteration;
  index.layout = layout;
  for (std::size_t rank = 0; rank < file_elements.size(); ++rank)
    index.files.push_back({rank_shard_path(static_cast<int>(rank)), file_elements[rank] * 12});
  for (const model::WholeModelTensor& tensor : whole)
    index.tensors.push_back({tensor.name, tensor.shape, {}});
  std::vector<std::uint64_t> written(file_elements.size(), 0);  // elements so far per file
  for (std::size_t r = 0; r < records.size(); r += 4) {
    const auto rank = static_cast<std::size_t>(records[r + 3]);
    const std::uint64_t count = static_cast<std::uint64_t>(records[r + 2] - records[r + 1]);
    const std::uint64_t elements = file_elements[rank];
    IndexPiece piece{
        static_cast<std::int64_t>(rank),
        records[r + 1],
        records[r + 2],
        {written[rank] * 4, (elements + written[rank]) * 4, (2 * elements + written[rank]) * 4}};
    written[rank] += count;
    index.tensors[static_cast<std::size_t>(records[r])].pieces.push_back(piece);
  }
  for (IndexTensor& tensor : index.tensors) {
    std::sort(tensor.pieces.begin(), tensor.pieces.end(),
              [](const IndexPiece& a, const IndexPiece& b) { return a.begin < b.begin; });
  }
  return index;
}

void write_text(const fs::path& path, const std::string& text) {
  core::OutputFile file(path);
  file.write(text);
  file.close();
}

}  // namespace

RankShard plan_rank_shard(const model::Qwen3MoeParameters& parameters,
                          const parallel::OptimizerShards& shards) {
  const std::vector<LocalTensor> tensors =
      local_tensors(parameters, model::whole_model_tensors(parameters));
  RankShard shard;
  std::int64_t packed = 0;  // where the segment sits in the owned pieces packed in order
  const auto add_segment = [&](const parallel::ParameterRange& range, std::int64_t flat,
                               std::int64_t, std::int64_t count) {
    // A tied head's copy (last stage) is the first stage's embedding, which that stage writes.
    if (range.tied_copy) {
      packed += count;
      return;
    }
    while (count > 0) {
      // The tensor holding `flat`: the last one starting at or before it.
      const auto holder = std::upper_bound(tensors.begin(), tensors.end(), flat,
                                           [](std::int64_t offset, const LocalTensor& tensor) {
                                             return offset < tensor.flat_offset;
                                           }) -
                          1;
      DYNCP_CHECK(holder >= tensors.begin() && flat < holder->flat_offset + holder->numel,
                  "every owned element belongs to a tensor");
      const std::int64_t begin = flat - holder->flat_offset;
      const std::int64_t take = std::min(count, holder->numel - begin);
      shard.pieces.push_back(
          {holder->whole_index, begin, begin + take, flat, packed, shard.elements});
      shard.elements += take;
      packed += take;
      flat += take;
      count -= take;
    }
  };
  for (const parallel::KindShards* kind : {&shards.dense, &shards.expert}) {
    const parallel::ShardPiece owned = kind->owned();
    kind->for_each_segment(owned.begin, owned.end, add_segment);
  }
  DYNCP_CHECK(packed == shards.owned_elements, "the segments add up to the owned elements");
  return shard;
}

std::vector<float> snapshot_rank_shard(const RankShard& shard, const ShardSources& sources) {
  std::vector<float> snapshot(static_cast<std::size_t>(shard.elements) * 3);
  float* out = snapshot.data();
  for (const ShardPart& part : sources.parts) {
    for (const RankPiece& piece : shard.pieces) {
      out = std::copy_n(part.at(piece), piece.count(), out);
    }
  }
  return snapshot;
}

ShardSources snapshot_sources(const RankShard& shard, const std::vector<float>& snapshot) {
  const auto elements = static_cast<std::size_t>(shard.elements);
  DYNCP_CHECK(snapshot.size() == elements * 3, "a snapshot holds three parts");
  return ShardSources{{ShardPart{snapshot.data(), false, true},
                       ShardPart{snapshot.data() + elements, false, true},
                       ShardPart{snapshot.data() + 2 * elements, false, true}}};
}

std::string rank_shard_path(int rank) {
  char name[48];
  std::snprintf(name, sizeof name, "shards/rank_%05d.bin", rank);
  return name;
}

std::optional<fs::path> begin_sharded_save(dist::Comm& world, CheckpointStore* store,
                                           const fs::path& save_dir, std::int64_t iteration) {
  std::int32_t ok = 1;
  if (world.rank() == 0) {
    try {
      const fs::path folder = store->begin(iteration);
      fs::create_directories(folder / "shards");
    } catch (const std::exception& error) {  // core::Error or std::filesystem's
      spdlog::error("checkpoint at iteration {} failed, the previous one is kept: {}", iteration,
                    error.what());
      ok = 0;
    }
  }
  world.broadcast(std::span<std::int32_t>(&ok, 1), 0);
  if (ok == 0) return std::nullopt;
  return CheckpointStore::temporary_folder(save_dir, iteration);
}

RankWriteResult write_rank_shard(const fs::path& folder, int rank, const RankShard& shard,
                                 const ShardSources& sources) noexcept {
  RankWriteResult result;
  const std::string relative = rank_shard_path(rank);
  try {
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash(XXH3_createState(),
                                                                         &XXH3_freeState);
    XXH3_64bits_reset(hash.get());
    core::OutputFile file(folder / relative);
    for (const ShardPart& part : sources.parts) {
      for (const RankPiece& piece : shard.pieces) {
        const std::size_t bytes = static_cast<std::size_t>(piece.count()) * sizeof(float);
        file.write(part.at(piece), bytes);
        XXH3_64bits_update(hash.get(), part.at(piece), bytes);
      }
    }
    file.close();
    result.written =
        ManifestEntry{relative, shard.file_bytes(), xxh3_hex(XXH3_64bits_digest(hash.get()))};
  } catch (const std::exception& error) {
    result.failure = "rank " + std::to_string(rank) + ": " + error.what();
  }
  return result;
}

bool finish_sharded_save(dist::Comm& world, CheckpointStore* store, const fs::path& folder,
                         const model::Qwen3MoeParameters& parameters, const RankShard& shard,
                         const RankWriteResult& result, const LoopState& state,
                         const SavingLayout& layout) {
  if (!result.failure.empty()) {
    spdlog::error("checkpoint at iteration {} failed on every rank, the previous one is kept: {}",
                  state.iteration, result.failure);
  }
  std::int32_t failed = result.failure.empty() ? 0 : 1;
  world.all_reduce(&failed, &failed, 1, core::DType::i32, dist::ReduceOp::max);
  // [elements, xxh3] of every rank's file.
  const std::uint64_t digest =
      result.written ? std::strtoull(result.written->xxh3_64.c_str(), nullptr, 16) : 0;
  const std::int64_t own[2] = {shard.elements, static_cast<std::int64_t>(digest)};
  std::vector<std::int64_t> files(static_cast<std::size_t>(world.size()) * 2);
  world.all_gather(std::span<const std::int64_t>(own, 2), std::span<std::int64_t>(files));
  const std::vector<std::int64_t> records = gather_pieces(world, shard);

  std::int32_t published = 0;
  if (world.rank() == 0 && failed != 0) {
    store->abandon(state.iteration);
  } else if (world.rank() == 0) {
    try {
      std::vector<std::uint64_t> elements;
      std::vector<ManifestEntry> known;
      for (int rank = 0; rank < world.size(); ++rank) {
        const auto count = static_cast<std::uint64_t>(files[static_cast<std::size_t>(rank) * 2]);
        elements.push_back(count);
        known.push_back(
            {rank_shard_path(rank), count * 12,
             xxh3_hex(static_cast<std::uint64_t>(files[static_cast<std::size_t>(rank) * 2 + 1]))});
      }
      fs::create_directories(folder / "model");
      write_text(folder / "model" / "config.json",
                 config::to_hf_config_json(parameters.architecture()) + "\n");
      write_text(folder / sharded_index_name,
                 sharded_index_json(build_index(model::whole_model_tensors(parameters), records,
                                                elements, state.iteration, layout)));
      LoopState saved = state;
      saved.format = 3;
      // Written last among the contents: the loop state says the files before it are complete.
      write_text(folder / "state.json", loop_state_json(saved));
      spdlog::info("checkpoint saved: {} ({} ranks wrote {:.1f} MiB each at most)",
                   store->commit(state.iteration, known).string(), world.size(),
                   static_cast<double>(*std::max_element(elements.begin(), elements.end()) * 12) /
                       (1024.0 * 1024.0));
      published = 1;
    } catch (const std::exception& error) {
      store->abandon(state.iteration);
      spdlog::error("checkpoint at iteration {} failed, the previous one is kept: rank 0: {}",
                    state.iteration, error.what());
    }
  }
  world.broadcast(std::span<std::int32_t>(&published, 1), 0);
  return published != 0;
}

bool save_sharded_checkpoint(dist::Comm& world, CheckpointStore* store, const fs::path& save_dir,
                             const model::Qwen3MoeParameters& parameters, const RankShard& shard,
                             const ShardSources& sources, const LoopState& state,
                             const SavingLayout& layout) {
  const std::optional<fs::path> folder =
      begin_sharded_save(world, store, save_dir, state.iteration);
  if (!folder) return false;
  const RankWriteResult result = write_rank_shard(*folder, world.rank(), shard, sources);
  return finish_sharded_save(world, store, *folder, parameters, shard, result, state, layout);
}

bool is_sharded_checkpoint(const fs::path& folder) {
  std::error_code error;
  return fs::exists(fs::symlink_status(folder / sharded_index_name, error));
}

LoopState read_sharded_checkpoint(const fs::path& folder, std::int64_t iteration,
                                  const model::Qwen3MoeParameters& parameters,
                                  const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                                  std::span<const parallel::ParameterRange> moment_ranges) {
  const fs::path state_path = folder / "state.json";
  const LoopState state = parse_loop_state(
      read_small_file(state_path, max_state_bytes, "loop state"), state_path.string(), iteration);
  if (state.format != 3)
    core::throw_data_error(state_path.string(), "format " + std::to_string(state.format) +
                                                    " beside an index.json: a sharded "
                                                    "checkpoint's state.json has format 3");
  const fs::path index_path = folder / sharded_index_name;
  const ShardedIndex index =
      parse_sharded_index(read_small_file(index_path, max_index_bytes, "sharded checkpoint index"),
                          index_path.string());
  if (index.iteration != iteration)
    core::throw_data_error(index_path.string(), "records iteration " +
                                                    std::to_string(index.iteration) + ", not " +
                                                    std::to_string(iteration));
  const std::vector<model::WholeModelTensor> whole = model::whole_model_tensors(parameters);
  if (index.tensors.size() != whole.size())
    core::throw_data_error(index_path.string(),
                           std::to_string(index.tensors.size()) + " tensors, but the model has " +
                               std::to_string(whole.size()) + " (does config.json match?)");

  std::vector<int> fds(index.files.size(), -1);
  const auto file_of = [&](std::int64_t file) {
    int& fd = fds[static_cast<std::size_t>(file)];
    if (fd < 0) {
      const fs::path path = folder / index.files[static_cast<std::size_t>(file)].path;
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        core::throw_data_error(path.string(), std::string("cannot open: ") + std::strerror(errno));
    }
    return fd;
  };
  struct CloseAll {
    std::vector<int>& fds;
    ~CloseAll() {
      for (const int fd : fds)
        if (fd >= 0) ::close(fd);
    }
  } close_all{fds};

  float* parts[3] = {parameters.all_values().data<float>(), exp_avg.data<float>(),
                     exp_avg_sq.data<float>()};
  for (const LocalTensor& local : local_tensors(parameters, whole)) {
    const IndexTensor& stored = index.tensors[static_cast<std::size_t>(local.whole_index)];
    const model::WholeModelTensor& expected = whole[static_cast<std::size_t>(local.whole_index)];
    if (stored.name != expected.name || stored.shape != expected.shape)
      core::throw_data_error(index_path.string(),
                             "tensor " + std::to_string(local.whole_index) + " is '" + stored.name +
                                 "', the model expects '" + expected.name +
                                 "' of the same shape (does config.json match?)");
    for (const IndexPiece& piece : stored.pieces) {
      const fs::path path = folder / index.files[static_cast<std::size_t>(piece.file)].path;
      const int fd = file_of(piece.file);
      const std::int64_t flat = local.flat_offset + piece.begin;
      read_exactly(fd, path, piece.offsets[0], parts[0] + flat,
                   static_cast<std::uint64_t>(piece.end - piece.begin) * 4);
      // The moments only where the loading optimizer keeps them.
      for (const parallel::ParameterRange& range : moment_ranges) {
        const std::int64_t begin = std::max(flat, range.offset);
        const std::int64_t end =
            std::min(flat + (piece.end - piece.begin), range.offset + range.count);
        if (begin >= end) continue;
        for (int part = 1; part < 3; ++part) {
          read_exactly(fd, path, piece.offsets[part] + static_cast<std::uint64_t>(begin - flat) * 4,
                       parts[part] + begin, static_cast<std::uint64_t>(end - begin) * 4);
        }
      }
    }
  }
  return state;
}

}  // namespace dyncp::train
