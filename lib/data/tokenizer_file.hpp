#pragma once
// Fast reading of an HF tokenizer.json: the vocabulary and merges (hundreds of thousands of
// entries) are streamed straight into their final containers by a SAX handler; the small rest
// of the file becomes an ordinary JSON tree with model.vocab and model.merges set to null.
// Internal to the tokenizer (it pulls in nlohmann/json).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dyncp::data {

struct TokenizerFile {
  nlohmann::json rest;
  std::unordered_map<std::string, std::int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  bool has_vocab = false;
  bool has_merges = false;
};

// Throws a data error naming `where` for invalid JSON or malformed vocab/merges entries.
TokenizerFile read_tokenizer_file(const std::string& text, const std::string& where);

}  // namespace dyncp::data
