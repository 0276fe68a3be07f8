#include "data/prepared_dataset.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "data/content_hash.hpp"

namespace dyncp::data {

namespace {

constexpr char cache_magic[8] = {'D', 'Y', 'N', 'C', 'P', 'P', 'R', 'P'};
constexpr std::uint32_t cache_version = 3;  // 2: Jinja interpreter; 3: per-sample template kwargs
constexpr std::size_t header_size = 128;

struct CacheHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t zero;
  std::uint64_t key;
  std::uint64_t tokenizer_hash;
  std::uint64_t num_samples;
  std::uint64_t total_tokens;
  PrepareStats stats;
};
static_assert(sizeof(CacheHeader) <= header_size);

std::size_t expected_file_size(std::uint64_t num_samples, std::uint64_t total_tokens) {
  return header_size + 8 * (num_samples + 1) + 8 * num_samples + 4 * total_tokens + total_tokens;
}

std::uint64_t cache_key(const PrepareOptions& options, const Tokenizer& tokenizer) {
  ContentHasher hasher;
  hasher.update(std::uint64_t{cache_version}).update(tokenizer.content_hash());
  hasher.update(static_cast<std::uint64_t>(options.seq_length))
      .update(static_cast<std::uint64_t>(options.truncation))
      .update(static_cast<std::uint64_t>(options.on_bad_sample))
      .update(static_cast<std::uint64_t>(options.max_records));
  for (const DatasetInput& input : options.inputs) {
    hasher.update(static_cast<std::uint64_t>(input.format));
    if (input.format == DatasetFormat::indexed) {
      hasher.update(hash_file(input.path.string() + ".idx"))
          .update(hash_file(input.path.string() + ".bin"));
    } else {
      hasher.update(hash_file(input.path));
    }
    if (input.format == DatasetFormat::chat_jsonl) {
      const ChatFieldMapping& fields = input.chat.fields;
      hasher.update_field(input.chat.template_kwargs_json)
          .update_field(fields.messages_key)
          .update_field(fields.role_key)
          .update_field(fields.content_key)
          .update_field(fields.tools_key)
          .update_field(fields.documents_key);
      for (const auto& [from, to] : fields.role_names) hasher.update_field(from).update_field(to);
    }
  }
  return hasher.digest();
}

void log_stats(const PrepareStats& stats, const std::filesystem::path& path) {
  spdlog::info(
      "prepared {}: {} samples kept of {} records, {} tokens, {} loss tokens; filtered: {} too "
      "long "
      "(dropped), {} truncated, {} without loss tokens, {} bad records skipped",
      path.string(), stats.samples_kept, stats.records_read, stats.total_tokens,
      stats.total_loss_tokens, stats.dropped_too_long, stats.truncated, stats.dropped_no_loss,
      stats.skipped_bad);
}

void write_cache(const std::filesystem::path& path, const PrepareOptions& options,
                 const Tokenizer& tokenizer, std::uint64_t key) {
  PrepareStats stats;
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::uint64_t> loss_tokens;
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> target_mask;
  const auto started = std::chrono::steady_clock::now();
  auto last_log = started;

  // Thrown to stop reading once max_records records have been seen.
  struct PrefixComplete {};
  const auto count_record = [&] {
    if (options.max_records > 0 &&
        stats.records_read >= static_cast<std::uint64_t>(options.max_records)) {
      throw PrefixComplete{};
    }
    ++stats.records_read;
  };
  const auto on_bad = [&](const std::exception& error) {
    count_record();
    if (options.on_bad_sample == OnBadSample::error) {
      throw core::Error(core::ErrorKind::data, "",
                        std::string(error.what()) + " (" + options.skip_bad_samples_hint +
                            " to skip such records)");
    }
    ++stats.skipped_bad;
    spdlog::warn("skipping bad record: {}", error.what());
  };
  const auto on_record = [&](RawRecord& record) {
    count_record();
    if (static_cast<std::int64_t>(record.tokens.size()) > options.seq_length) {
      if (options.truncation == Truncation::drop) {
        ++stats.dropped_too_long;
        return;
      }
      if (options.truncation == Truncation::error) {
        core::throw_data_error(record.where,
                               "sample has " + std::to_string(record.tokens.size()) +
                                   " tokens, more than seq_length " +
                                   std::to_string(options.seq_length) +
                                   " (dataset.truncation: drop or truncate to allow it)");
      }
      ++stats.truncated;
      record.tokens.resize(static_cast<std::size_t>(options.seq_length));
      record.target_mask.resize(static_cast<std::size_t>(options.seq_length));
    }
    const std::int64_t loss = count_loss_tokens(record.target_mask);
    if (loss == 0) {
      ++stats.dropped_no_loss;
      return;
    }
    tokens.insert(tokens.end(), record.tokens.begin(), record.tokens.end());
    target_mask.insert(target_mask.end(), record.target_mask.begin(), record.target_mask.end());
    offsets.push_back(tokens.size());
    loss_tokens.push_back(static_cast<std::uint64_t>(loss));
    stats.total_loss_tokens += static_cast<std::uint64_t>(loss);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_log > std::chrono::seconds(10)) {
      last_log = now;
      spdlog::info("preparing: {} records, {} tokens so far", stats.records_read, tokens.size());
    }
  };
  try {
    for (const DatasetInput& input : options.inputs) {
      spdlog::info("preparing {} ({}) on {} thread(s)", input.path.string(),
                   to_string(input.format), std::max(1, options.num_workers));
      read_dataset_input(input, tokenizer, on_record, on_bad, options.num_workers);
    }
  } catch (const PrefixComplete&) {
    spdlog::info("stopped after the first {} records (max_records)", options.max_records);
  }
  stats.samples_kept = loss_tokens.size();
  stats.total_tokens = tokens.size();

  CacheHeader header{};
  std::memcpy(header.magic, cache_magic, sizeof(cache_magic));
  header.version = cache_version;
  header.key = key;
  header.tokenizer_hash = tokenizer.content_hash();
  header.num_samples = stats.samples_kept;
  header.total_tokens = stats.total_tokens;
  header.stats = stats;
  // Written through a private temporary name and renamed: readers never see a partial cache,
  // and a full disk, a file-size limit or a failed close is an error naming the file (the
  // temporary is removed), never a truncated cache under the final name.
  core::write_file_replacing(
      path,
      [&](core::OutputFile& out) {
        char padded_header[header_size] = {};
        std::memcpy(padded_header, &header, sizeof(header));
        out.write(padded_header, header_size);
        const auto write_vector = [&out](const auto& values) {
          out.write(values.data(), values.size() * sizeof(values[0]));
        };
        write_vector(offsets);
        write_vector(loss_tokens);
        write_vector(tokens);
        write_vector(target_mask);
      },
      ".tmp." + std::to_string(::getpid()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("preparation took {:.1f} s", seconds);
  log_stats(stats, path);
}

}  // namespace

Truncation parse_truncation(std::string_view name, const std::string& key_path) {
  if (name == "drop") return Truncation::drop;
  if (name == "truncate") return Truncation::truncate;
  if (name == "error") return Truncation::error;
  core::throw_config_error(key_path,
                           std::string(name) + ": expected one of [drop, truncate, error]");
}

OnBadSample parse_on_bad_sample(std::string_view name, const std::string& key_path) {
  if (name == "error") return OnBadSample::error;
  if (name == "skip") return OnBadSample::skip;
  core::throw_config_error(key_path, std::string(name) + ": expected one of [error, skip]");
}

std::filesystem::path prepared_cache_path(const PrepareOptions& options,
                                          const Tokenizer& tokenizer) {
  return options.cache_dir / ("prepared-" + hex_digest(cache_key(options, tokenizer)) + ".bin");
}

std::filesystem::path prepare_dataset(const PrepareOptions& options, const Tokenizer& tokenizer) {
  if (options.inputs.empty()) core::throw_config_error("dataset.inputs", "no input files given");
  if (options.seq_length < 2) {
    core::throw_config_error("dataset.seq_length",
                             std::to_string(options.seq_length) + ": must be >= 2");
  }
  std::error_code error;
  std::filesystem::create_directories(options.cache_dir, error);
  if (error) {
    core::throw_config_error("dataset.cache_dir",
                             options.cache_dir.string() + ": cannot create: " + error.message());
  }
  const std::uint64_t key = cache_key(options, tokenizer);
  const auto path = options.cache_dir / ("prepared-" + hex_digest(key) + ".bin");
  if (std::filesystem::exists(path)) return path;
  const FileLock lock(path.string() + ".lock");
  if (std::filesystem::exists(path)) return path;  // another process finished it while we waited
  write_cache(path, options, tokenizer, key);
  return path;
}

PreparedDataset::PreparedDataset(const std::filesystem::path& path, const Tokenizer* tokenizer)
    : path_(path), file_(path) {
  const std::string where = path.string();
  if (file_.size() < header_size)
    core::throw_data_error(where, "truncated cache file (no header); delete it to re-prepare");
  CacheHeader header{};
  std::memcpy(&header, file_.data(), sizeof(header));
  if (std::memcmp(header.magic, cache_magic, sizeof(cache_magic)) != 0) {
    core::throw_data_error(where, "not a dyncp prepared-dataset cache (bad magic)");
  }
  if (header.version != cache_version) {
    core::throw_data_error(where, "cache version " + std::to_string(header.version) +
                                      " but this build reads " + std::to_string(cache_version) +
                                      "; delete it to re-prepare");
  }
  if (tokenizer != nullptr && header.tokenizer_hash != tokenizer->content_hash()) {
    core::throw_data_error(where, "cache was prepared with another tokenizer (hash " +
                                      hex_digest(header.tokenizer_hash) + ", current " +
                                      hex_digest(tokenizer->content_hash()) +
                                      "); prepare again with the current tokenizer");
  }
  if (header.num_samples > file_.size() || header.total_tokens > file_.size() ||
      file_.size() != expected_file_size(header.num_samples, header.total_tokens)) {
    core::throw_data_error(
        where, "truncated or oversized cache: " + std::to_string(file_.size()) +
                   " bytes, the header describes " +
                   std::to_string(expected_file_size(header.num_samples, header.total_tokens)));
  }
  num_samples_ = header.num_samples;
  tokenizer_hash_ = header.tokenizer_hash;
  stats_ = header.stats;
  const std::byte* cursor = file_.data() + header_size;
  offsets_ = reinterpret_cast<const std::uint64_t*>(cursor);
  cursor += 8 * (num_samples_ + 1);
  loss_tokens_ = reinterpret_cast<const std::uint64_t*>(cursor);
  cursor += 8 * num_samples_;
  tokens_ = reinterpret_cast<const std::int32_t*>(cursor);
  cursor += 4 * header.total_tokens;
  target_mask_ = reinterpret_cast<const std::uint8_t*>(cursor);
  if (offsets_[0] != 0 || offsets_[num_samples_] != header.total_tokens) {
    core::throw_data_error(where, "corrupt cache index; delete it to re-prepare");
  }
}

void PreparedDataset::check_index(std::int64_t index) const {
  if (index < 0 || static_cast<std::uint64_t>(index) >= num_samples_) {
    core::throw_data_error(path_.string(), "sample id " + std::to_string(index) +
                                               " out of range [0, " + std::to_string(num_samples_) +
                                               ")");
  }
}

std::int64_t PreparedDataset::length(std::int64_t index) const {
  check_index(index);
  return static_cast<std::int64_t>(offsets_[index + 1] - offsets_[index]);
}

std::int64_t PreparedDataset::loss_tokens(std::int64_t index) const {
  check_index(index);
  return static_cast<std::int64_t>(loss_tokens_[index]);
}

std::span<const std::int32_t> PreparedDataset::tokens(std::int64_t index) const {
  check_index(index);
  return {tokens_ + offsets_[index],
          static_cast<std::size_t>(offsets_[index + 1] - offsets_[index])};
}

std::span<const std::uint8_t> PreparedDataset::target_mask(std::int64_t index) const {
  check_index(index);
  return {target_mask_ + offsets_[index],
          static_cast<std::size_t>(offsets_[index + 1] - offsets_[index])};
}

Sample PreparedDataset::sample(std::int64_t index, std::int64_t alignment,
                               std::int32_t pad_token_id) const {
  return make_sample(index, tokens(index), target_mask(index), alignment, pad_token_id);
}

}  // namespace dyncp::data
