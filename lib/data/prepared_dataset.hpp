#pragma once
// The preparation cache: every input tokenized once into one binary file that all ranks
// memory-map. File name: <cache_dir>/prepared-<key>.bin, key = hash of the input files' bytes,
// their formats, the tokenizer files (chat template included), the filtering settings and the
// format version, so any change to what the samples would be gives a new file.
//
// Layout (little-endian):
//   header (128 bytes): magic "DYNCPPRP", u32 version, u32 zero, u64 key, u64 tokenizer hash,
//     u64 num_samples N, u64 total_tokens T, then PrepareStats' nine u64 counters, zero padding
//   offsets      u64[N + 1]   sample k is tokens [offsets[k], offsets[k+1])
//   loss_tokens  u64[N]       loss tokens of each sample (sample.hpp: targets at 1..n-1)
//   tokens       i32[T]
//   target_mask  u8[T]        1 where the token is a training target
//
// Filtering (counted in PrepareStats, logged, never silent): a sample longer than seq_length is
// dropped (truncation drop), cut to seq_length (truncate) or an error (error); a sample without a
// loss token is dropped; a record that cannot be parsed or rendered is an error or, under
// on_bad_sample skip, skipped.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/dataset_source.hpp"
#include "data/mapped_file.hpp"
#include "data/sample.hpp"
#include "data/tokenizer.hpp"

namespace dyncp::data {

enum class Truncation { drop, truncate, error };
enum class OnBadSample { error, skip };
Truncation parse_truncation(std::string_view name, const std::string& key_path);
OnBadSample parse_on_bad_sample(std::string_view name, const std::string& key_path);

struct PrepareOptions {
  std::vector<DatasetInput> inputs;
  std::filesystem::path cache_dir;
  std::int64_t seq_length = 4096;  // longest sample kept, in tokens
  Truncation truncation = Truncation::drop;
  OnBadSample on_bad_sample = OnBadSample::error;
  // Read at most this many records over all inputs (0 = all): a quick prefix for --dry-run.
  std::int64_t max_records = 0;
  // Threads that parse, render and tokenize JSONL records (dataset.num_workers; 0 or 1: the
  // calling thread alone). Not part of the cache key: the cache is the same for any count.
  int num_workers = 1;
  // How the caller's user asks for skipping bad records, for the error that stops at one.
  std::string skip_bad_samples_hint = "set dataset.on_bad_sample: skip";
};

struct PrepareStats {
  std::uint64_t records_read = 0;  // records parsed or attempted
  std::uint64_t samples_kept = 0;
  std::uint64_t dropped_too_long = 0;  // truncation: drop
  std::uint64_t truncated = 0;         // truncation: truncate
  std::uint64_t dropped_no_loss = 0;
  std::uint64_t skipped_bad = 0;  // on_bad_sample: skip
  std::uint64_t total_tokens = 0;
  std::uint64_t total_loss_tokens = 0;
  std::uint64_t reserved = 0;
};

// The cache file these options and this tokenizer map to (it may not exist yet).
std::filesystem::path prepared_cache_path(const PrepareOptions& options,
                                          const Tokenizer& tokenizer);

// Returns the cache path, preparing it first when missing. Under an exclusive file lock in
// cache_dir: one process prepares (logging progress) while others wait, then find it ready.
std::filesystem::path prepare_dataset(const PrepareOptions& options, const Tokenizer& tokenizer);

class PreparedDataset final : public SampleSource {
 public:
  // Maps a cache file. With `tokenizer`, a cache written with another tokenizer is a data error.
  explicit PreparedDataset(const std::filesystem::path& path, const Tokenizer* tokenizer = nullptr);

  std::int64_t size() const override { return static_cast<std::int64_t>(num_samples_); }
  std::int64_t length(std::int64_t index) const override;
  std::int64_t loss_tokens(std::int64_t index) const;
  std::span<const std::int32_t> tokens(std::int64_t index) const;
  std::span<const std::uint8_t> target_mask(std::int64_t index) const;
  Sample sample(std::int64_t index, std::int64_t alignment,
                std::int32_t pad_token_id) const override;

  const PrepareStats& stats() const { return stats_; }
  std::uint64_t tokenizer_hash() const { return tokenizer_hash_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void check_index(std::int64_t index) const;

  std::filesystem::path path_;
  MappedFile file_;
  std::uint64_t num_samples_ = 0;
  std::uint64_t tokenizer_hash_ = 0;
  PrepareStats stats_;
  const std::uint64_t* offsets_ = nullptr;
  const std::uint64_t* loss_tokens_ = nullptr;
  const std::int32_t* tokens_ = nullptr;
  const std::uint8_t* target_mask_ = nullptr;
};

}  // namespace dyncp::data
