#pragma once
// Byte-level BPE (the `model` section of an HF tokenizer.json of type "BPE"). A pre-token's
// bytes start as one symbol per byte (its byte-level character); the adjacent pair with the
// lowest merge rank is merged, leftmost first on ties, until no adjacent pair has a merge.
// Merge ranks live in a hash map keyed by the pair of symbol ids; results of repeated pieces are
// cached. Thread-safe: the cache is shared under a mutex (dataset.num_workers threads encode
// with one instance); a cached piece gives the same ids as an uncached one, so neither the
// thread count nor the order of calls changes any result.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/byte_level.hpp"

namespace dyncp::data {

class BpeModel {
 public:
  // `vocab` maps token strings (byte-level characters) to ids; `merges[r]` is the pair with
  // rank r. `where` names the file in errors.
  BpeModel(std::unordered_map<std::string, std::int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const std::string& where);

  // Appends the ids of one pre-token given as raw UTF-8 bytes.
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& ids) const;

  std::optional<std::int32_t> token_id(std::string_view token) const;
  const std::unordered_map<std::string, std::int32_t>& vocab() const { return vocab_; }
  const ByteLevelAlphabet& alphabet() const { return alphabet_; }
  std::size_t num_merges() const { return merge_by_pair_.size(); }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t merged_id;
  };
  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  void merge_symbols(std::vector<std::int32_t>& symbols) const;

  ByteLevelAlphabet alphabet_;
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::uint64_t, Merge> merge_by_pair_;
  std::array<std::int32_t, 256> byte_token_id_{};
  bool ignore_merges_ = false;
  mutable std::mutex piece_cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> piece_cache_;
};

}  // namespace dyncp::data
