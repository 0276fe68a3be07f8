#pragma once
// Input datasets and how their records become (tokens, target mask) pairs.
//   chat_jsonl    one chat sample per line (chat_json.hpp), rendered with the tokenizer's chat
//                 template (chat_template.hpp)
//   tokens_jsonl  one {"input_ids": [...], "loss_mask"?: [...]} per line; loss_mask is aligned
//                 with input_ids (1 = this token is a training target) and defaults to all ones
//   indexed       a Megatron .bin/.idx pair (give the path prefix); every token is a target
// Blank lines in JSONL files are ignored.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_json.hpp"
#include "data/tokenizer.hpp"

namespace dyncp::data {

enum class DatasetFormat { chat_jsonl, tokens_jsonl, indexed };

// "chat_jsonl" | "tokens_jsonl" | "indexed"; a config error naming `key_path` otherwise.
DatasetFormat parse_dataset_format(std::string_view name, const std::string& key_path);
const char* to_string(DatasetFormat format);

// How chat_jsonl records are read and rendered.
struct ChatDataOptions {
  // A JSON object of extra chat-template variables (e.g. {"enable_thinking": false}); empty:
  // none.
  std::string template_kwargs_json;
  ChatFieldMapping fields;
};

struct DatasetInput {
  std::filesystem::path path;  // a file, or the .bin/.idx prefix for `indexed`
  DatasetFormat format = DatasetFormat::chat_jsonl;
  ChatDataOptions chat;
};

// The template variables of `json_text` (a JSON object); a data error naming `where` otherwise.
ChatTemplateKwargs parse_template_kwargs(const std::string& json_text, const std::string& where);

struct RawRecord {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> target_mask;
  std::string where;  // file:line or file#document
};

// Parses one token-id JSONL line; ids must lie in [0, vocab_size).
RawRecord parse_token_record(std::string_view line, const std::string& where,
                             std::int32_t vocab_size);

// Calls on_line(line, line_number) for each non-blank line (1-based numbers).
void for_each_jsonl_line(const std::filesystem::path& path,
                         const std::function<void(std::string_view, std::int64_t)>& on_line);

// Reads every record of `input`. A record that fails to parse or render is passed to
// on_bad(error) (which rethrows or counts it); good ones go to on_record. JSONL lines are
// parsed, rendered and tokenized on `workers` threads (dataset.num_workers; record_workers.hpp);
// on_record and on_bad are called on the calling thread in line order whatever the count.
void read_dataset_input(const DatasetInput& input, const Tokenizer& tokenizer,
                        const std::function<void(RawRecord&)>& on_record,
                        const std::function<void(const std::exception&)>& on_bad, int workers = 1);

}  // namespace dyncp::data
