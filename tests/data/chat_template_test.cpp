#include "data/chat_template.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/chat_json.hpp"
#include "test_paths.hpp"

using namespace dyncp::data;
using dyncp::data::test::fixture_path;
using dyncp::data::test::qwen3_tokenizer;
using dyncp::data::test::read_file;

namespace {
nlohmann::ordered_json chat_fixture() {
  return nlohmann::ordered_json::parse(read_file(fixture_path("qwen3_chat_cases.json")));
}
}  // namespace

TEST_CASE("qwen3 chat template (tokenizer loaded once for all sections)", "[data][chat][qwen3]") {
  SECTION("qwen3 rendering equals transformers apply_chat_template character for character") {
    const auto fixture = chat_fixture();
    REQUIRE(fixture["cases"].size() >= 15);
    std::size_t index = 0;
    for (const auto& test_case : fixture["cases"]) {
      const Conversation conversation =
          parse_chat_sample(test_case["sample"].dump(), "case " + std::to_string(index++));
      const RenderedChat rendered = render_qwen3_chat(conversation, "case");
      INFO("case " << index << ": " << test_case["sample"].dump());
      CHECK(rendered.text == test_case["text"].get<std::string>());
    }
  }
  SECTION("chat tokens equal HF tokens of the rendered text") {
    const auto fixture = chat_fixture();
    for (const auto& test_case : fixture["cases"]) {
      const Conversation conversation = parse_chat_sample(test_case["sample"].dump(), "case");
      const TokenizedChat chat = tokenize_chat(qwen3_tokenizer(), conversation, "case");
      INFO(test_case["sample"].dump());
      CHECK(chat.tokens == test_case["ids"].get<std::vector<std::int32_t>>());
      CHECK(chat.loss_mask.size() == chat.tokens.size());
    }
  }
  SECTION("loss covers assistant content and its <|im_end|>, nothing else") {
    const Tokenizer& tokenizer = qwen3_tokenizer();
    const Conversation conversation = parse_chat_sample(
        R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q one"},
            {"role": "assistant", "content": "A one"}, {"role": "user", "content": "Q two"},
            {"role": "assistant", "content": "A two"}]})",
        "inline");
    const TokenizedChat chat = tokenize_chat(tokenizer, conversation, "inline");
    std::string supervised;
    std::vector<std::int32_t> supervised_ids;
    for (std::size_t i = 0; i < chat.tokens.size(); ++i) {
      if (chat.loss_mask[i]) supervised_ids.push_back(chat.tokens[i]);
    }
    supervised = tokenizer.decode(supervised_ids);
    CHECK(supervised == "A one<|im_end|><think>\n\n</think>\n\nA two<|im_end|>");
    // The newline after each <|im_end|> is not supervised.
    const std::int32_t im_end = tokenizer.require_token_id("<|im_end|>");
    for (std::size_t i = 0; i + 1 < chat.tokens.size(); ++i) {
      if (chat.tokens[i] == im_end) CHECK(chat.loss_mask[i + 1] == 0);
    }
  }
  SECTION("the shared Qwen3 template is recognised and others are rejected") {
    REQUIRE_NOTHROW(require_supported_chat_template(qwen3_tokenizer(), "tok"));
    CHECK_FALSE(is_supported_chat_template("{{ messages }}"));
  }
}

TEST_CASE("bad chat samples are data errors that say where and what", "[data][chat]") {
  const auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      const Conversation conversation = parse_chat_sample(text, "train.jsonl:7");
      render_qwen3_chat(conversation, "train.jsonl:7");
      FAIL("expected an error for " << text);
    } catch (const dyncp::core::Error& error) {
      CHECK(error.exit_code() == 2);
      CHECK_THAT(error.what(), Catch::Contains("train.jsonl:7") && Catch::Contains(needle));
    }
  };
  expect_error("{\"messages\": [", "invalid JSON");
  expect_error(R"({"conversation": []})", "missing \"messages\"");
  expect_error(R"({"messages": []})", "empty conversation");
  expect_error(R"({"messages": [{"role": "user", "content": "hi"}]})", "no assistant turn");
  expect_error(R"({"messages": [{"role": "narrator", "content": "hi"}]})",
               "unknown role \"narrator\"");
  expect_error(R"({"messages": [{"role": "user", "content": null}]})",
               "\"content\" must be a string");
  expect_error(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
               "must be a string");
  expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}",
               "invalid UTF-8");
  expect_error(
      R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"arguments": {}}]}]})",
      "no string \"name\"");
}
