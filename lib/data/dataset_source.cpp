#include "data/dataset_source.hpp"

#include <algorithm>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_text_check.hpp"
#include "data/chat_json.hpp"
#include "data/chat_template.hpp"
#include "data/indexed_dataset.hpp"
#include "data/record_workers.hpp"
#include "data/utf8.hpp"

namespace dyncp::data {

// The recipe's dataset.type names (chat_jsonl, token_jsonl, megatron_indexed), so dyncp-data
// and dyncp-train spell a format the same way; the earlier short names stay accepted.
DatasetFormat parse_dataset_format(std::string_view name, const std::string& key_path) {
  if (name == "chat_jsonl") return DatasetFormat::chat_jsonl;
  if (name == "token_jsonl" || name == "tokens_jsonl") return DatasetFormat::tokens_jsonl;
  if (name == "megatron_indexed" || name == "indexed") return DatasetFormat::indexed;
  core::throw_config_error(key_path, std::string(name) +
                                         ": expected one of [chat_jsonl, token_jsonl, "
                                         "megatron_indexed] (the names of dataset.type)");
}

const char* to_string(DatasetFormat format) {
  switch (format) {
    case DatasetFormat::chat_jsonl:
      return "chat_jsonl";
    case DatasetFormat::tokens_jsonl:
      return "tokens_jsonl";
    case DatasetFormat::indexed:
      return "indexed";
  }
  return "?";
}

RawRecord parse_token_record(std::string_view line, const std::string& where,
                             std::int32_t vocab_size) {
  core::check_json_text(line, where, 0);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& error) {
    core::throw_data_error(where, std::string("invalid JSON: ") + error.what());
  }
  if (!root.is_object() || !root.contains("input_ids") || !root["input_ids"].is_array()) {
    core::throw_data_error(
        where,
        "missing \"input_ids\"; a token sample is {\"input_ids\": [...], \"loss_mask\"?: [...]}");
  }
  RawRecord record;
  record.where = where;
  const auto& ids = root["input_ids"];
  record.tokens.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer() || ids[i].get<std::int64_t>() < 0 ||
        ids[i].get<std::int64_t>() >= vocab_size) {
      core::throw_data_error(where, "input_ids[" + std::to_string(i) + "] = " + ids[i].dump() +
                                        " is not a token id in [0, " + std::to_string(vocab_size) +
                                        ")");
    }
    record.tokens.push_back(ids[i].get<std::int32_t>());
  }
  if (record.tokens.empty()) core::throw_data_error(where, "\"input_ids\" is empty");
  if (root.contains("loss_mask") && !root["loss_mask"].is_null()) {
    const auto& mask = root["loss_mask"];
    if (!mask.is_array() || mask.size() != ids.size()) {
      core::throw_data_error(where, "\"loss_mask\" must be a list as long as \"input_ids\" (" +
                                        std::to_string(ids.size()) + ")");
    }
    for (std::size_t i = 0; i < mask.size(); ++i) {
      const bool valid =
          (mask[i].is_number_integer() && (mask[i] == 0 || mask[i] == 1)) || mask[i].is_boolean();
      if (!valid)
        core::throw_data_error(where, "loss_mask[" + std::to_string(i) + "] must be 0 or 1");
      record.target_mask.push_back(mask[i].is_boolean()
                                       ? (mask[i].get<bool>() ? 1 : 0)
                                       : static_cast<std::uint8_t>(mask[i].get<int>()));
    }
  } else {
    record.target_mask.assign(record.tokens.size(), 1);
  }
  return record;
}

ChatTemplateKwargs parse_template_kwargs(const std::string& json_text, const std::string& where) {
  ChatTemplateKwargs kwargs;
  if (json_text.empty()) return kwargs;
  jinja::Value root;
  try {
    root = jinja::parse_json_value(json_text);
  } catch (const std::invalid_argument& error) {
    core::throw_data_error(where, std::string("invalid JSON: ") + error.what());
  }
  if (!root.is_dict()) core::throw_data_error(where, "template kwargs must be a JSON object");
  for (const auto& [name, value] : root.dict_ptr()->entries) kwargs.emplace_back(name, value);
  return kwargs;
}

void for_each_jsonl_line(const std::filesystem::path& path,
                         const std::function<void(std::string_view, std::int64_t)>& on_line) {
  core::require_regular_file(path, "the dataset file");
  std::ifstream in(path, std::ios::binary);
  if (!in) core::throw_data_error(path.string(), "cannot open dataset file");
  std::string line;
  std::int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    on_line(line, line_number);
  }
}

namespace {

// One line's outcome: the record, or the error converting it (handed on in line order).
struct ConvertedLine {
  RawRecord record;
  std::exception_ptr error;
};

// Reads `path` a batch of lines at a time, converts each batch on `workers` threads
// (record_workers.hpp) and hands the results on in line order: on_record for records, on_bad
// for data errors; any other error propagates, at its line, as it would with one thread.
void convert_jsonl_lines(
    const std::filesystem::path& path, int workers,
    const std::function<RawRecord(std::string_view line, std::int64_t line_number)>& convert,
    const std::function<void(RawRecord&)>& on_record,
    const std::function<void(const std::exception&)>& on_bad) {
  // Enough lines per thread that starting the threads is noise next to tokenizing them.
  const std::size_t batch_lines = 64 * static_cast<std::size_t>(std::max(1, workers));
  std::vector<std::string> lines;
  std::vector<std::int64_t> line_numbers;
  std::vector<ConvertedLine> converted;
  const auto flush = [&] {
    converted.assign(lines.size(), {});
    for_each_in_slices(lines.size(), workers, [&](std::size_t index, int) {
      try {
        converted[index].record = convert(lines[index], line_numbers[index]);
      } catch (...) {
        converted[index].error = std::current_exception();
      }
    });
    for (ConvertedLine& line : converted) {
      if (!line.error) {
        on_record(line.record);
        continue;
      }
      try {
        std::rethrow_exception(line.error);
      } catch (const core::Error& error) {
        if (error.kind() != core::ErrorKind::data) throw;
        on_bad(error);
      }
    }
    lines.clear();
    line_numbers.clear();
  };
  for_each_jsonl_line(path, [&](std::string_view line, std::int64_t line_number) {
    lines.emplace_back(line);
    line_numbers.push_back(line_number);
    if (lines.size() == batch_lines) flush();
  });
  flush();
}

}  // namespace

void read_dataset_input(const DatasetInput& input, const Tokenizer& tokenizer,
                        const std::function<void(RawRecord&)>& on_record,
                        const std::function<void(const std::exception&)>& on_bad, int workers) {
  const std::string file = input.path.string();
  switch (input.format) {
    case DatasetFormat::chat_jsonl: {
      const ChatTemplate chat_template = ChatTemplate::from_tokenizer(tokenizer, file);
      const ChatTemplateKwargs kwargs =
          parse_template_kwargs(input.chat.template_kwargs_json, file + " (chat template kwargs)");
      convert_jsonl_lines(
          input.path, workers,
          [&](std::string_view line, std::int64_t line_number) {
            RawRecord record;
            record.where = file + ":" + std::to_string(line_number);
            const ChatSample sample = parse_chat_sample(line, record.where, input.chat.fields);
            TokenizedChat chat =
                tokenize_chat(tokenizer, chat_template, sample, kwargs, record.where);
            record.tokens = std::move(chat.tokens);
            record.target_mask = std::move(chat.loss_mask);
            return record;
          },
          on_record, on_bad);
      break;
    }
    case DatasetFormat::tokens_jsonl:
      convert_jsonl_lines(
          input.path, workers,
          [&](std::string_view line, std::int64_t line_number) {
            const std::string where = file + ":" + std::to_string(line_number);
            require_valid_utf8(line, where);
            return parse_token_record(line, where, tokenizer.vocab_size());
          },
          on_record, on_bad);
      break;
    case DatasetFormat::indexed: {
      const IndexedDataset dataset(input.path);
      for (std::int64_t document = 0; document < dataset.num_documents(); ++document) {
        RawRecord record;
        record.where = file + "#" + std::to_string(document);
        try {
          dataset.read_document(document, record.tokens);
        } catch (const core::Error& error) {
          if (error.kind() != core::ErrorKind::data) throw;
          on_bad(error);
          continue;
        }
        bool in_vocabulary = true;
        for (std::size_t i = 0; i < record.tokens.size(); ++i) {
          if (record.tokens[i] < 0 || record.tokens[i] >= tokenizer.vocab_size()) {
            on_bad(core::Error(core::ErrorKind::data, record.where,
                               "token " + std::to_string(record.tokens[i]) + " at position " +
                                   std::to_string(i) + " is outside the tokenizer's vocabulary"));
            in_vocabulary = false;
            break;
          }
        }
        if (!in_vocabulary) continue;
        record.target_mask.assign(record.tokens.size(), 1);
        on_record(record);
      }
      break;
    }
  }
}

}  // namespace dyncp::data
