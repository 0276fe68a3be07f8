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
#include "train/sharded_checkpoint_tensors.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

// A piece travels to rank 0 as [tensor, begin, end, row, rows, column, columns].
constexpr std::size_t record_fields = 7;

// Every rank's pieces on rank 0 as records of record_fields values and the rank (pieces' byte
// offsets follow from their order in the rank's file, so they need not travel).
std::vector<std::int64_t> gather_pieces(dist::Comm& world, const RankShard& shard) {
  std::vector<std::int64_t> mine;
  mine.reserve(shard.pieces.size() * record_fields);
  for (const RankPiece& piece : shard.pieces) {
    mine.insert(mine.end(), {piece.tensor, piece.begin, piece.end, piece.block.row,
                             piece.block.rows, piece.block.column, piece.block.columns});
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
  records.reserve(total / record_fields * (record_fields + 1));
  std::size_t at = 0;
  for (int rank = 0; rank < world.size(); ++rank) {
    for (std::size_t i = 0; i < recv_counts[static_cast<std::size_t>(rank)];
         i += record_fields, at += record_fields) {
      records.insert(records.end(), all.begin() + static_cast<std::ptrdiff_t>(at),
                     all.begin() + static_cast<std::ptrdiff_t>(at + record_fields));
      records.push_back(rank);
    }
  }
  return records;
}

// Format 2: each tensor's distinct blocks in (row, column) order, the pieces naming them.
void number_blocks(IndexTensor& tensor) {
  std::vector<std::size_t> order(tensor.blocks.size());
  for (std::size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const IndexBlock &x = tensor.blocks[a], &y = tensor.blocks[b];
    return x.row != y.row ? x.row < y.row : x.column < y.column;
  });
  std::vector<std::int64_t> renumbered(order.size());
  std::vector<IndexBlock> sorted;
  for (std::size_t b = 0; b < order.size(); ++b) {
    renumbered[order[b]] = static_cast<std::int64_t>(b);
    sorted.push_back(tensor.blocks[order[b]]);
  }
  tensor.blocks = std::move(sorted);
  for (IndexPiece& piece : tensor.pieces)
    piece.block = renumbered[static_cast<std::size_t>(piece.block)];
}

ShardedIndex build_index(const std::vector<model::WholeModelTensor>& whole,
                         const std::vector<std::int64_t>& records,
                         const std::vector<std::uint64_t>& file_elements, std::int64_t iteration,
                         const SavingLayout& layout, bool blocks) {
  ShardedIndex index;
  index.iteration = iteration;
  index.layout = layout;
  for (std::size_t rank = 0; rank < file_elements.size(); ++rank)
    index.files.push_back({rank_shard_path(static_cast<int>(rank)), file_elements[rank] * 12});
  for (const model::WholeModelTensor& tensor : whole)
    index.tensors.push_back({tensor.name, tensor.shape, {}, {}});
  std::vector<std::uint64_t> written(file_elements.size(), 0);  // elements so far per file
  constexpr std::size_t stride = record_fields + 1;
  for (std::size_t r = 0; r < records.size(); r += stride) {
    const auto rank = static_cast<std::size_t>(records[r + record_fields]);
    const std::uint64_t count = static_cast<std::uint64_t>(records[r + 2] - records[r + 1]);
    const std::uint64_t elements = file_elements[rank];
    IndexPiece piece{
        static_cast<std::int64_t>(rank),
        records[r + 1],
        records[r + 2],
        {written[rank] * 4, (elements + written[rank]) * 4, (2 * elements + written[rank]) * 4}};
    written[rank] += count;
    IndexTensor& tensor = index.tensors[static_cast<std::size_t>(records[r])];
    if (blocks) {
      const IndexBlock block{records[r + 3], records[r + 4], records[r + 5], records[r + 6]};
      const auto found = std::find(tensor.blocks.begin(), tensor.blocks.end(), block);
      piece.block = found - tensor.blocks.begin();
      if (found == tensor.blocks.end()) tensor.blocks.push_back(block);
    }
    tensor.pieces.push_back(piece);
  }
  for (IndexTensor& tensor : index.tensors) {
    if (blocks) number_blocks(tensor);
    std::sort(tensor.pieces.begin(), tensor.pieces.end(),
              [](const IndexPiece& a, const IndexPiece& b) {
                return a.block != b.block ? a.block < b.block : a.begin < b.begin;
              });
  }
  return index;
}

void write_text(const fs::path& path, const std::string& text) {
  core::OutputFile file(path);
  file.write(text);
  file.close();
}

}  // namespace

namespace detail {

std::vector<LocalTensor> local_tensors(const model::Qwen3MoeParameters& parameters,
                                       const std::vector<model::WholeModelTensor>& whole) {
  std::unordered_map<std::string, std::int64_t> by_name;
  for (std::size_t i = 0; i < whole.size(); ++i)
    by_name.emplace(whole[i].name, static_cast<std::int64_t>(i));
  const auto* base = static_cast<const float*>(parameters.all_values().raw_data());
  std::vector<LocalTensor> tensors;
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    const auto found = by_name.find(tensor.name);
    DYNCP_CHECK(found != by_name.end(), "every held tensor is one of the whole model's");
    tensors.push_back({static_cast<const float*>(tensor.value.raw_data()) - base,
                       tensor.value.numel(), found->second, &tensor});
  }
  std::sort(tensors.begin(), tensors.end(), [](const LocalTensor& a, const LocalTensor& b) {
    return a.flat_offset < b.flat_offset;
  });
  return tensors;
}

std::vector<LocalBlock> local_blocks(const model::HfTensor& tensor) {
  const std::int64_t columns =
      tensor.value.numel() / std::max<std::int64_t>(tensor.value.size(0), 1);
  std::vector<LocalBlock> blocks;
  tensor.for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
    blocks.push_back({{hf_row, count, tensor.hf_column_first, columns}, row * columns});
  });
  std::sort(blocks.begin(), blocks.end(),
            [](const LocalBlock& a, const LocalBlock& b) { return a.storage < b.storage; });
  return blocks;
}

}  // namespace detail

RankShard plan_rank_shard(const model::Qwen3MoeParameters& parameters,
                          const parallel::OptimizerShards& shards) {
  const std::vector<detail::LocalTensor> tensors =
      detail::local_tensors(parameters, model::whole_model_tensors(parameters));
  RankShard shard;
  shard.blocks = parameters.tensor_parallel().active();
  // The tensors every TP rank holds whole are written by TP rank 0's pool alone.
  const bool writes_replicated = parameters.tensor_parallel().index == 0;
  std::int64_t packed = 0;  // the owned elements before the segment
  // Elements [begin, end) of the holder's storage, at flat / packed offsets.
  const auto add_piece = [&](const detail::LocalTensor& holder, std::int64_t begin,
                             std::int64_t end, std::int64_t flat, std::int64_t at_packed) {
    if (!shard.blocks) {
      shard.pieces.push_back({holder.whole_index, begin, end, flat, at_packed, shard.elements});
      shard.elements += end - begin;
      return;
    }
    if (!holder.tensor->is_expert && holder.tensor->holds_whole() && !writes_replicated) return;
    for (const detail::LocalBlock& block : detail::local_blocks(*holder.tensor)) {
      const std::int64_t first = std::max(begin, block.storage),
                         last = std::min(end, block.storage + block.block.numel());
      if (first >= last) continue;
      shard.pieces.push_back({holder.whole_index, first - block.storage, last - block.storage,
                              flat + (first - begin), at_packed + (first - begin), shard.elements,
                              block.block});
      shard.elements += last - first;
    }
  };
  const auto add_segment = [&](const parallel::ParameterRange& range, std::int64_t flat,
                               std::int64_t, std::int64_t count) {
    // A tied head's copy (last stage) is the first stage's embedding, which that stage writes.
    if (range.tied_copy) {
      packed += count;
      return;
    }
    while (count > 0) {
      // The tensor holding `flat`: the last one starting at or before it.
      const auto holder =
          std::upper_bound(tensors.begin(), tensors.end(), flat,
                           [](std::int64_t offset, const detail::LocalTensor& tensor) {
                             return offset < tensor.flat_offset;
                           }) -
          1;
      DYNCP_CHECK(holder >= tensors.begin() && flat < holder->flat_offset + holder->numel,
                  "every owned element belongs to a tensor");
      const std::int64_t begin = flat - holder->flat_offset;
      const std::int64_t take = std::min(count, holder->numel - begin);
      add_piece(*holder, begin, begin + take, flat, packed);
      packed += take;
      flat += take;
      count -= take;
    }
  };
  for (const parallel::KindShards* kind : {&shards.dense, &shards.expert}) {
    const parallel::ShardPiece owned = kind->owned();
    kind->for_each_segment(owned.begin, owned.end, add_segment);
  }
  DYNCP_CHECK(packed == shards.owned_elements, "the pieces add up to the owned elements");
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
                                                elements, state.iteration, layout, shard.blocks)));
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

}  // namespace dyncp::train
