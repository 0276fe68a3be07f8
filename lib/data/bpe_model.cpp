#include "data/bpe_model.hpp"

#include <algorithm>
#include <queue>

#include "core/error.hpp"

namespace dyncp::data {

namespace {
constexpr std::size_t max_cached_piece_bytes = 256;
constexpr std::size_t max_cache_entries = 1 << 18;
}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, std::int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges, const std::string& where)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  for (int byte = 0; byte < 256; ++byte) {
    const auto found = vocab_.find(alphabet_.symbol_for_byte(static_cast<unsigned char>(byte)));
    if (found == vocab_.end()) {
      core::throw_data_error(where, "model.vocab has no token for byte " + std::to_string(byte) +
                                        "; byte-level BPE needs all 256 byte symbols");
    }
    byte_token_id_[byte] = found->second;
  }
  merge_by_pair_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto left_id = vocab_.find(left);
    const auto right_id = vocab_.find(right);
    const auto merged_id = vocab_.find(left + right);
    if (left_id == vocab_.end() || right_id == vocab_.end() || merged_id == vocab_.end()) {
      core::throw_data_error(where, "model.merges[" + std::to_string(rank) + "] (\"" + left +
                                        "\" \"" + right +
                                        "\") uses a token missing from model.vocab");
    }
    // The first occurrence of a pair keeps its (lower) rank.
    merge_by_pair_.try_emplace(pair_key(left_id->second, right_id->second),
                               Merge{static_cast<std::int32_t>(rank), merged_id->second});
  }
}

std::optional<std::int32_t> BpeModel::token_id(std::string_view token) const {
  const auto found = vocab_.find(std::string(token));
  if (found == vocab_.end()) return std::nullopt;
  return found->second;
}

void BpeModel::merge_symbols(std::vector<std::int32_t>& symbols) const {
  const std::size_t count = symbols.size();
  if (count < 2) return;
  // Symbols form a doubly linked list over their original positions; a heap holds candidate
  // merges ordered by (rank, position) and stale entries are skipped when popped.
  std::vector<std::int32_t> next(count), previous(count);
  std::vector<char> alive(count, 1);
  for (std::size_t i = 0; i < count; ++i) {
    next[i] = static_cast<std::int32_t>(i + 1);
    previous[i] = static_cast<std::int32_t>(i) - 1;
  }
  struct Candidate {
    std::int32_t rank;
    std::int32_t position;
    std::int32_t left_id;
    std::int32_t right_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::vector<Candidate> storage;
  storage.reserve(count);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>{},
                                                                              std::move(storage));
  const auto push_pair = [&](std::int32_t left) {
    const std::int32_t right = next[left];
    if (left < 0 || right >= static_cast<std::int32_t>(count)) return;
    const auto found = merge_by_pair_.find(pair_key(symbols[left], symbols[right]));
    if (found != merge_by_pair_.end()) {
      heap.push(Candidate{found->second.rank, left, symbols[left], symbols[right]});
    }
  };
  for (std::size_t i = 0; i + 1 < count; ++i) push_pair(static_cast<std::int32_t>(i));
  while (!heap.empty()) {
    const Candidate candidate = heap.top();
    heap.pop();
    const std::int32_t left = candidate.position;
    const std::int32_t right = next[left];
    if (!alive[left] || right >= static_cast<std::int32_t>(count) ||
        symbols[left] != candidate.left_id || symbols[right] != candidate.right_id) {
      continue;
    }
    symbols[left] = merge_by_pair_.at(pair_key(candidate.left_id, candidate.right_id)).merged_id;
    alive[right] = 0;
    next[left] = next[right];
    if (next[right] < static_cast<std::int32_t>(count)) previous[next[right]] = left;
    if (previous[left] >= 0) push_pair(previous[left]);
    push_pair(left);
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (alive[i]) symbols[kept++] = symbols[i];
  }
  symbols.resize(kept);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<std::int32_t>& ids) const {
  const bool cacheable = piece.size() <= max_cached_piece_bytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    const std::lock_guard<std::mutex> lock(piece_cache_mutex_);
    const auto cached = piece_cache_.find(key);
    if (cached != piece_cache_.end()) {
      ids.insert(ids.end(), cached->second.begin(), cached->second.end());
      return;
    }
  }
  std::vector<std::int32_t> symbols;
  symbols.reserve(piece.size());
  bool whole_piece_in_vocab = false;
  if (ignore_merges_) {
    std::string mapped;
    for (const char byte : piece)
      mapped += alphabet_.symbol_for_byte(static_cast<unsigned char>(byte));
    if (const auto found = vocab_.find(mapped); found != vocab_.end()) {
      symbols.push_back(found->second);
      whole_piece_in_vocab = true;
    }
  }
  if (!whole_piece_in_vocab) {
    for (const char byte : piece)
      symbols.push_back(byte_token_id_[static_cast<unsigned char>(byte)]);
    merge_symbols(symbols);
  }
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    const std::lock_guard<std::mutex> lock(piece_cache_mutex_);
    if (piece_cache_.size() >= max_cache_entries) piece_cache_.clear();
    piece_cache_.emplace(std::move(key), std::move(symbols));
  }
}

}  // namespace dyncp::data
