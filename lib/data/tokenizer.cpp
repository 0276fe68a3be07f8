#include "data/tokenizer.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_text_check.hpp"
#include "data/bpe_model.hpp"
#include "data/content_hash.hpp"
#include "data/pre_tokenizer.hpp"
#include "data/tokenizer_file.hpp"
#include "data/utf8.hpp"

namespace dyncp::data {

namespace {

using nlohmann::json;

std::string read_text_file(const std::filesystem::path& path) {
  core::require_regular_file(path, "the tokenizer file");
  std::ifstream in(path, std::ios::binary);
  if (!in) core::throw_data_error(path.string(), "cannot open file for reading");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json(const std::string& text, const std::string& where) {
  core::check_json_text(text, where);
  try {
    return json::parse(text);
  } catch (const json::exception& error) {
    core::throw_data_error(where, std::string("invalid JSON: ") + error.what());
  }
}

std::string type_of(const json& node) {
  return node.is_object() && node.contains("type") && node["type"].is_string()
             ? node["type"].get<std::string>()
             : std::string();
}

// The Split regex from pre_tokenizer; rejects every other pre-tokenizer layout.
std::string split_pattern(const json& pre_tokenizer, const std::string& where) {
  const std::string expected =
      "expected Sequence[Split(Regex, behavior Isolated), ByteLevel(use_regex=false)]";
  if (type_of(pre_tokenizer) != "Sequence" || !pre_tokenizer.contains("pretokenizers")) {
    core::throw_data_error(where + ": pre_tokenizer", "unsupported layout; " + expected);
  }
  const json& steps = pre_tokenizer["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2 || type_of(steps[0]) != "Split" ||
      type_of(steps[1]) != "ByteLevel") {
    core::throw_data_error(where + ": pre_tokenizer", "unsupported layout; " + expected);
  }
  const json& split = steps[0];
  if (split.value("behavior", "") != "Isolated" || split.value("invert", false) ||
      !split.contains("pattern") || !split["pattern"].contains("Regex")) {
    core::throw_data_error(
        where + ": pre_tokenizer.pretokenizers[0]",
        "only Split with a Regex pattern, behavior Isolated, invert false is supported");
  }
  const json& byte_level = steps[1];
  if (byte_level.value("use_regex", true) || byte_level.value("add_prefix_space", false)) {
    core::throw_data_error(where + ": pre_tokenizer.pretokenizers[1]",
                           "ByteLevel must have use_regex false and add_prefix_space false");
  }
  return split["pattern"]["Regex"].get<std::string>();
}

// A token field of tokenizer_config.json: a string, {"content": ...}, or null.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_directory(const std::filesystem::path& directory) {
  const auto tokenizer_path = directory / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer_path)) {
    core::throw_data_error(
        directory.string(),
        "no tokenizer.json in this directory; pass the folder of an HF tokenizer");
  }
  std::string config_text;
  if (std::filesystem::exists(directory / "tokenizer_config.json")) {
    config_text = read_text_file(directory / "tokenizer_config.json");
  }
  Tokenizer tokenizer =
      from_json(read_text_file(tokenizer_path), config_text, tokenizer_path.string());
  // A separate chat_template.jinja (newer HF layout) takes precedence over the config's.
  if (std::filesystem::exists(directory / "chat_template.jinja")) {
    tokenizer.chat_template_ = read_text_file(directory / "chat_template.jinja");
    tokenizer.content_hash_ = ContentHasher()
                                  .update(tokenizer.content_hash_)
                                  .update_field(tokenizer.chat_template_)
                                  .digest();
  }
  return tokenizer;
}

Tokenizer Tokenizer::null_tokenizer(std::int32_t vocab_size) {
  if (vocab_size <= 0) core::throw_data_error("NullTokenizer", "vocab_size must be positive");
  Tokenizer tokenizer;
  tokenizer.vocab_size_ = vocab_size;
  tokenizer.pad_token_id_ = 0;
  tokenizer.added_by_first_byte_.assign(256, {});
  tokenizer.content_hash_ = ContentHasher()
                                .update_field("NullTokenizer")
                                .update(static_cast<std::uint64_t>(vocab_size))
                                .digest();
  return tokenizer;
}

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& config_json,
                               const std::string& where) {
  TokenizerFile file = read_tokenizer_file(tokenizer_json, where);
  const json& root = file.rest;
  Tokenizer tokenizer;
  tokenizer.content_hash_ =
      ContentHasher().update_field(tokenizer_json).update_field(config_json).digest();

  const json& model = root.contains("model") ? root["model"] : json();
  if (type_of(model) != "BPE")
    core::throw_data_error(where + ": model.type", "only BPE models are supported");
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    core::throw_data_error(where + ": model.dropout",
                           "BPE dropout is not supported; set it to null");
  }
  if (!file.has_vocab || !file.has_merges) {
    core::throw_data_error(where + ": model", "missing vocab object or merges list");
  }
  std::int32_t max_id = -1;
  for (const auto& entry : file.vocab) max_id = std::max(max_id, entry.second);
  const bool ignore_merges = model.value("ignore_merges", false);
  tokenizer.model_ =
      std::make_unique<BpeModel>(std::move(file.vocab), file.merges, ignore_merges, where);

  const json normalizer = root.value("normalizer", json());
  if (!normalizer.is_null()) {
    if (type_of(normalizer) != "NFC") {
      core::throw_data_error(
          where + ": normalizer",
          "only null or NFC normalizers are supported, got " + normalizer.dump());
    }
    tokenizer.normalize_nfc_ = true;
  }
  tokenizer.splitter_ = std::make_unique<RegexSplitter>(
      split_pattern(root.value("pre_tokenizer", json()), where), where + ": pre_tokenizer");
  if (root.contains("decoder") && !root["decoder"].is_null() &&
      type_of(root["decoder"]) != "ByteLevel") {
    core::throw_data_error(where + ": decoder", "only the ByteLevel decoder is supported");
  }

  for (const json& added : root.value("added_tokens", json::array())) {
    if (added.value("lstrip", false) || added.value("rstrip", false) ||
        added.value("single_word", false)) {
      core::throw_data_error(where + ": added_tokens",
                             "token " + added.value("content", "") +
                                 " uses lstrip/rstrip/single_word, which is not supported");
    }
    AddedToken token{added.at("id").get<std::int32_t>(), added.at("content").get<std::string>(),
                     added.value("special", false)};
    if (token.content.empty())
      core::throw_data_error(where + ": added_tokens", "empty token content");
    max_id = std::max(max_id, token.id);
    tokenizer.added_tokens_.push_back(std::move(token));
  }
  tokenizer.vocab_size_ = max_id + 1;
  tokenizer.decoded_bytes_.assign(static_cast<std::size_t>(tokenizer.vocab_size_), std::string());
  tokenizer.is_special_.assign(static_cast<std::size_t>(tokenizer.vocab_size_), 0);
  for (const auto& [token, id] : tokenizer.model_->vocab()) {
    auto bytes = tokenizer.model_->alphabet().decode_token(token);
    // Tokens outside the byte alphabet cannot come out of byte-level BPE; decode them verbatim.
    tokenizer.decoded_bytes_[static_cast<std::size_t>(id)] = bytes ? std::move(*bytes) : token;
  }
  tokenizer.added_by_first_byte_.assign(256, {});
  for (std::size_t i = 0; i < tokenizer.added_tokens_.size(); ++i) {
    const AddedToken& token = tokenizer.added_tokens_[i];
    tokenizer.decoded_bytes_[static_cast<std::size_t>(token.id)] = token.content;
    tokenizer.is_special_[static_cast<std::size_t>(token.id)] = token.special ? 1 : 0;
    tokenizer.added_by_first_byte_[static_cast<unsigned char>(token.content[0])].push_back(i);
  }
  for (auto& candidates : tokenizer.added_by_first_byte_) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) {
      return tokenizer.added_tokens_[a].content.size() > tokenizer.added_tokens_[b].content.size();
    });
  }

  const json config = config_json.empty()
                          ? json::object()
                          : parse_json(config_json, where + " (tokenizer_config.json)");
  const std::string pad = config_token(config, "pad_token").value_or("<|endoftext|>");
  const auto pad_id = tokenizer.token_id(pad);
  if (!pad_id) core::throw_data_error(where, "pad token " + pad + " is not in the vocabulary");
  tokenizer.pad_token_id_ = *pad_id;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                           "cls_token", "mask_token"}) {
    if (const auto token = config_token(config, name))
      tokenizer.named_special_tokens_.emplace_back(name, *token);
  }
  if (const auto eos = config_token(config, "eos_token"))
    tokenizer.eos_token_id_ = tokenizer.token_id(*eos);
  if (config.contains("chat_template")) {
    const json& chat_template = config["chat_template"];
    if (chat_template.is_string()) {
      tokenizer.chat_template_ = chat_template.get<std::string>();
    } else if (chat_template.is_array()) {
      for (const json& named : chat_template) {
        if (named.value("name", "") == "default")
          tokenizer.chat_template_ = named.value("template", "");
        if (named.value("name", "") == "tool_use")
          tokenizer.tool_use_chat_template_ = named.value("template", "");
      }
    }
  }
  return tokenizer;
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const AddedToken& added : added_tokens_) {
    if (added.content == token) return added.id;
  }
  return model_ ? model_->token_id(token) : std::nullopt;
}

std::int32_t Tokenizer::require_token_id(std::string_view token) const {
  const auto id = token_id(token);
  if (!id)
    core::throw_data_error("tokenizer",
                           "token " + std::string(token) + " is not in the vocabulary");
  return *id;
}

std::optional<std::pair<std::size_t, std::size_t>> Tokenizer::find_added_token(
    std::string_view text, std::size_t from) const {
  for (std::size_t position = from; position < text.size(); ++position) {
    const auto& candidates = added_by_first_byte_[static_cast<unsigned char>(text[position])];
    for (const std::size_t index : candidates) {
      const std::string& content = added_tokens_[index].content;
      if (text.compare(position, content.size(), content) == 0)
        return std::make_pair(position, index);
    }
  }
  return std::nullopt;
}

std::string Tokenizer::normalize(std::string_view text) const {
  if (!normalize_nfc_) return std::string(text);
  const bool ascii = std::all_of(
      text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0x80) == 0; });
  if (ascii) return std::string(text);
  utf8proc_uint8_t* normalized = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &normalized,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) {
    core::throw_data_error("text",
                           std::string("NFC normalization failed: ") + utf8proc_errmsg(length));
  }
  std::string result(reinterpret_cast<const char*>(normalized), static_cast<std::size_t>(length));
  std::free(normalized);
  return result;
}

namespace {

// Where the pieces of a segment went under NFC: splitting before an ASCII character never
// changes the normalization (an ASCII character is a starter that composes with nothing before
// it), so each run "ASCII character + following non-ASCII characters" normalizes on its own.
struct NormalizedChunk {
  std::size_t normalized_begin = 0;
  std::size_t original_begin = 0;
  bool changed = false;
};

}  // namespace

void Tokenizer::encode_segment(std::string_view segment, std::size_t base_offset, Encoding& out,
                               bool want_offsets) const {
  if (segment.empty()) return;
  if (model_ == nullptr)
    core::throw_data_error("NullTokenizer", "cannot tokenize text: it reads token ids only");
  const std::string normalized = normalize(segment);
  std::vector<NormalizedChunk> chunks;
  if (want_offsets && normalized != segment) {
    std::string rebuilt;
    std::size_t begin = 0;
    while (begin < segment.size()) {
      std::size_t end = begin + 1;
      while (end < segment.size() && (static_cast<unsigned char>(segment[end]) & 0x80) != 0) ++end;
      const std::string_view piece = segment.substr(begin, end - begin);
      const std::string piece_normalized = end - begin == 1 ? std::string(piece) : normalize(piece);
      const bool changed = piece_normalized != piece;
      if (changed || chunks.empty() || chunks.back().changed) {
        chunks.push_back({rebuilt.size(), begin, changed});
      }
      rebuilt += piece_normalized;
      begin = end;
    }
    // Should the chunked form ever differ, every token maps to the segment's start.
    if (rebuilt != normalized) chunks.assign(1, {0, 0, true});
  }
  // A token's first byte in `segment`: exact outside chunks NFC changed, else the chunk start.
  const auto original_offset = [&](std::size_t normalized_offset) {
    if (chunks.empty()) return base_offset + normalized_offset;
    auto chunk = std::upper_bound(
        chunks.begin(), chunks.end(), normalized_offset,
        [](std::size_t offset, const NormalizedChunk& c) { return offset < c.normalized_begin; });
    --chunk;
    const std::size_t inside = chunk->changed ? 0 : normalized_offset - chunk->normalized_begin;
    return base_offset + chunk->original_begin + inside;
  };
  splitter_->split(normalized, [&](std::size_t offset, std::size_t length) {
    const std::size_t before = out.ids.size();
    model_->encode_piece(std::string_view(normalized).substr(offset, length), out.ids);
    if (want_offsets) {
      // Every token of a piece starts at or after the piece; record exact starts.
      std::size_t position = offset;
      for (std::size_t k = before; k < out.ids.size(); ++k) {
        out.offsets.push_back(original_offset(position));
        position += decoded_bytes_[static_cast<std::size_t>(out.ids[k])].size();
      }
    }
  });
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, const std::string& where) const {
  require_valid_utf8(text, where);
  Encoding encoding;
  encoding.ids.reserve(text.size() / 3 + 4);
  encoding.offsets.reserve(text.size() / 3 + 4);
  std::size_t position = 0;
  while (position < text.size()) {
    const auto added = find_added_token(text, position);
    const std::size_t segment_end = added ? added->first : text.size();
    encode_segment(text.substr(position, segment_end - position), position, encoding, true);
    if (!added) break;
    encoding.ids.push_back(added_tokens_[added->second].id);
    encoding.offsets.push_back(added->first);
    position = added->first + added_tokens_[added->second].content.size();
  }
  return encoding;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, const std::string& where) const {
  require_valid_utf8(text, where);
  Encoding encoding;
  encoding.ids.reserve(text.size() / 3 + 4);
  std::size_t position = 0;
  while (position < text.size()) {
    const auto added = find_added_token(text, position);
    const std::size_t segment_end = added ? added->first : text.size();
    encode_segment(text.substr(position, segment_end - position), position, encoding, false);
    if (!added) break;
    encoding.ids.push_back(added_tokens_[added->second].id);
    position = added->first + added_tokens_[added->second].content.size();
  }
  return std::move(encoding.ids);
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_) {
      core::throw_data_error("token " + std::to_string(i), "id " + std::to_string(id) +
                                                               " is outside the vocabulary [0, " +
                                                               std::to_string(vocab_size_) + ")");
    }
    if (model_ == nullptr)
      core::throw_data_error("NullTokenizer", "cannot decode ids to text: it has no vocabulary");
    if (skip_special_tokens && is_special_[static_cast<std::size_t>(id)]) continue;
    text += decoded_bytes_[static_cast<std::size_t>(id)];
  }
  return text;
}

}  // namespace dyncp::data
