#pragma once
// A byte-level BPE tokenizer read from a Hugging Face tokenizer directory (tokenizer.json and,
// when present, tokenizer_config.json), token-exact with HF `tokenizers` for Qwen2/Qwen3-style
// files. Encoding: added tokens are matched literally in the raw text first (leftmost, longest
// first) and emitted as their ids; every other segment is NFC-normalized (when the file has an
// NFC normalizer), split by the pre-tokenizer regex, mapped to byte-level characters and BPE'd.
// Supported tokenizer.json subset (anything else is rejected with the field named):
//   model.type BPE (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges), no unk,
//   no dropout; normalizer null or NFC; pre_tokenizer Sequence[Split(Regex, Isolated),
//   ByteLevel(use_regex=false)]; decoder ByteLevel; added tokens without lstrip/rstrip/single_word.
// Not thread-safe (regex match data and the piece cache are reused); one instance per thread.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dyncp::data {

class BpeModel;
class RegexSplitter;

struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool special = false;
};

struct Encoding {
  std::vector<std::int32_t> ids;
  // Byte offset in the input text where each token starts. Inside a run of characters that NFC
  // rewrote (an ASCII character and the non-ASCII ones after it), tokens report the run's start.
  std::vector<std::size_t> offsets;
};

class Tokenizer {
 public:
  // `directory` holds tokenizer.json and optionally tokenizer_config.json.
  static Tokenizer from_directory(const std::filesystem::path& directory);
  // `tokenizer_json` is the file's text; `config_json` may be empty. `where` names the source.
  static Tokenizer from_json(const std::string& tokenizer_json, const std::string& config_json,
                             const std::string& where);

  // Megatron's NullTokenizer: no vocabulary file, for data that is already token ids. Ids are
  // [0, vocab_size), the pad token is 0 (pad rows carry no labels); encoding or decoding text
  // is a data error.
  static Tokenizer null_tokenizer(std::int32_t vocab_size);
  bool is_null() const { return model_ == nullptr; }

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Throws a data error naming `where` when `text` is not valid UTF-8.
  std::vector<std::int32_t> encode(std::string_view text, const std::string& where = "text") const;
  Encoding encode_with_offsets(std::string_view text, const std::string& where = "text") const;
  // Raw bytes (a token boundary inside a UTF-8 sequence gives partial bytes); throws a data
  // error for ids outside the vocabulary.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;
  // NFC form of `text` when the tokenizer normalizes, else `text` unchanged.
  std::string normalize(std::string_view text) const;

  std::optional<std::int32_t> token_id(std::string_view token) const;
  // Like token_id, but a data error naming the token when it is absent.
  std::int32_t require_token_id(std::string_view token) const;
  // One past the largest id (vocab and added tokens).
  std::int32_t vocab_size() const { return vocab_size_; }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }

  // From tokenizer_config.json: pad_token (else <|endoftext|>), eos_token, chat_template.
  std::int32_t pad_token_id() const { return pad_token_id_; }
  std::optional<std::int32_t> eos_token_id() const { return eos_token_id_; }
  const std::string& chat_template() const { return chat_template_; }
  // The template named "tool_use" when tokenizer_config.json lists named templates (transformers
  // renders samples with tools with it); empty otherwise.
  const std::string& tool_use_chat_template() const { return tool_use_chat_template_; }
  // The named special tokens tokenizer_config.json sets (bos_token, eos_token, unk_token,
  // sep_token, pad_token, cls_token, mask_token), in that order: what transformers passes to
  // chat templates.
  const std::vector<std::pair<std::string, std::string>>& named_special_tokens() const {
    return named_special_tokens_;
  }
  // Hash of tokenizer.json and tokenizer_config.json contents (part of cache keys).
  std::uint64_t content_hash() const { return content_hash_; }

 private:
  Tokenizer();
  void encode_segment(std::string_view segment, std::size_t base_offset, Encoding& out,
                      bool want_offsets) const;
  // Position and index of the leftmost-longest added token at or after `from`.
  std::optional<std::pair<std::size_t, std::size_t>> find_added_token(std::string_view text,
                                                                      std::size_t from) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<RegexSplitter> splitter_;
  bool normalize_nfc_ = false;
  std::vector<AddedToken> added_tokens_;
  // Added-token indices by first byte, longest content first.
  std::vector<std::vector<std::size_t>> added_by_first_byte_;
  std::vector<std::string> decoded_bytes_;  // by id
  std::vector<char> is_special_;            // by id
  std::int32_t vocab_size_ = 0;
  std::int32_t pad_token_id_ = 0;
  std::optional<std::int32_t> eos_token_id_;
  std::string chat_template_;
  std::string tool_use_chat_template_;
  std::vector<std::pair<std::string, std::string>> named_special_tokens_;
  std::uint64_t content_hash_ = 0;
};

}  // namespace dyncp::data
