#include "data/tokenizer_file.hpp"

#include "core/error.hpp"

namespace dyncp::data {

namespace {

using json = nlohmann::json;

// Forwards events to a DOM builder, except inside model.vocab and model.merges, which it
// consumes itself (the DOM gets a null in their place).
class TokenizerSax {
 public:
  TokenizerSax(TokenizerFile& file, const std::string& where)
      : file_(file), where_(where), dom_(file.rest, false) {}

  bool null() { return capture_ == Capture::none ? dom_.null() : bad("null"); }
  bool boolean(bool value) {
    return capture_ == Capture::none ? dom_.boolean(value) : bad("boolean");
  }
  bool number_integer(json::number_integer_t value) {
    if (capture_ == Capture::vocab) return vocab_id(value);
    return capture_ == Capture::none ? dom_.number_integer(value) : bad("number");
  }
  bool number_unsigned(json::number_unsigned_t value) {
    if (capture_ == Capture::vocab) return vocab_id(static_cast<std::int64_t>(value));
    return capture_ == Capture::none ? dom_.number_unsigned(value) : bad("number");
  }
  bool number_float(json::number_float_t value, const json::string_t& text) {
    return capture_ == Capture::none ? dom_.number_float(value, text) : bad("number");
  }
  bool binary(json::binary_t& value) {
    return capture_ == Capture::none ? dom_.binary(value) : bad("binary");
  }
  bool string(json::string_t& value) {
    if (capture_ == Capture::merges) {
      if (merge_depth_ == 0) {  // "left right"
        const std::size_t space = value.find(' ', 1);
        if (space == std::string::npos) return bad("merge without a space");
        file_.merges.emplace_back(value.substr(0, space), value.substr(space + 1));
        return true;
      }
      merge_parts_.push_back(std::move(value));
      return true;
    }
    return capture_ == Capture::none ? dom_.string(value) : bad("string");
  }
  bool start_object(std::size_t size) {
    ++depth_;
    if (capture_ == Capture::pending_vocab) {
      capture_ = Capture::vocab;
      capture_depth_ = depth_;
      file_.has_vocab = true;
      file_.vocab.reserve(size == static_cast<std::size_t>(-1) ? 1 << 16 : size);
      return dom_.null();
    }
    if (capture_ != Capture::none) return bad("object");
    return dom_.start_object(size);
  }
  bool key(json::string_t& value) {
    if (capture_ == Capture::vocab) {
      pending_key_ = std::move(value);
      return true;
    }
    if (capture_ != Capture::none) return bad("key");
    path_.resize(static_cast<std::size_t>(depth_));
    path_.back() = value;
    if (depth_ == 2 && path_[0] == "model" && value == "vocab") capture_ = Capture::pending_vocab;
    if (depth_ == 2 && path_[0] == "model" && value == "merges") capture_ = Capture::pending_merges;
    return dom_.key(value);
  }
  bool end_object() {
    if (capture_ == Capture::vocab) {
      if (depth_ == capture_depth_) capture_ = Capture::none;
      --depth_;
      return true;
    }
    if (capture_ != Capture::none) return bad("end of object");
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t size) {
    ++depth_;
    if (capture_ == Capture::pending_merges) {
      capture_ = Capture::merges;
      capture_depth_ = depth_;
      file_.has_merges = true;
      if (size != static_cast<std::size_t>(-1)) file_.merges.reserve(size);
      return dom_.null();
    }
    if (capture_ == Capture::merges) {
      if (merge_depth_ != 0) return bad("nested merge");
      merge_depth_ = 1;
      merge_parts_.clear();
      return true;
    }
    if (capture_ != Capture::none) return bad("array");
    return dom_.start_array(size);
  }
  bool end_array() {
    --depth_;
    if (capture_ == Capture::merges) {
      if (merge_depth_ == 1) {
        merge_depth_ = 0;
        if (merge_parts_.size() != 2) return bad("merge that is not a [left, right] pair");
        file_.merges.emplace_back(std::move(merge_parts_[0]), std::move(merge_parts_[1]));
        return true;
      }
      capture_ = Capture::none;  // end of the merges list
      return true;
    }
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) {
    core::throw_data_error(
        where_, "invalid JSON at byte " + std::to_string(position) + ": " + error.what());
  }

 private:
  enum class Capture { none, pending_vocab, vocab, pending_merges, merges };

  bool vocab_id(std::int64_t id) {
    if (id < 0 || id > INT32_MAX) return bad("token id out of range");
    file_.vocab.emplace(std::move(pending_key_), static_cast<std::int32_t>(id));
    return true;
  }
  bool bad(const std::string& what) {
    const std::string section = capture_ == Capture::vocab || capture_ == Capture::pending_vocab
                                    ? "model.vocab"
                                    : "model.merges";
    core::throw_data_error(where_ + ": " + section, "unexpected " + what);
  }

  TokenizerFile& file_;
  const std::string& where_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  Capture capture_ = Capture::none;
  int depth_ = 0;
  int capture_depth_ = 0;
  int merge_depth_ = 0;
  std::vector<std::string> path_;
  std::string pending_key_;
  std::vector<std::string> merge_parts_;
};

}  // namespace

TokenizerFile read_tokenizer_file(const std::string& text, const std::string& where) {
  TokenizerFile file;
  TokenizerSax handler(file, where);
  if (!json::sax_parse(text, &handler)) core::throw_data_error(where, "invalid JSON");
  return file;
}

}  // namespace dyncp::data
