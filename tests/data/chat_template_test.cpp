#include "data/chat_template.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/chat_json.hpp"
#include "test_paths.hpp"

using namespace dyncp::data;
using dyncp::data::test::demo_tokenizer;
using dyncp::data::test::fixture_path;
using dyncp::data::test::qwen3_tokenizer;
using dyncp::data::test::read_file;

namespace {
nlohmann::ordered_json chat_fixture() {
  return nlohmann::ordered_json::parse(read_file(fixture_path("qwen3_chat_cases.json")));
}

std::string supervised_text(const Tokenizer& tokenizer, const TokenizedChat& chat) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < chat.tokens.size(); ++i) {
    if (chat.loss_mask[i]) ids.push_back(chat.tokens[i]);
  }
  return tokenizer.decode(ids);
}
}  // namespace

TEST_CASE("qwen3 chat template (tokenizer loaded once for all sections)", "[data][chat][qwen3]") {
  const Tokenizer& tokenizer = qwen3_tokenizer();
  const ChatTemplate chat_template = ChatTemplate::from_tokenizer(tokenizer, "qwen3");
  SECTION("rendering equals transformers apply_chat_template character for character") {
    const auto fixture = chat_fixture();
    REQUIRE(fixture["cases"].size() >= 15);
    std::size_t index = 0;
    for (const auto& test_case : fixture["cases"]) {
      const ChatSample sample =
          parse_chat_sample(test_case["sample"].dump(), "case " + std::to_string(index++));
      const RenderedChat rendered = chat_template.render(sample, {}, "case");
      INFO("case " << index << ": " << test_case["sample"].dump());
      CHECK(rendered.text == test_case["text"].get<std::string>());
    }
  }
  SECTION("ids equal HF's and the loss mask equals the hand-written Qwen3 renderer's") {
    const auto fixture = chat_fixture();
    for (const auto& test_case : fixture["cases"]) {
      const ChatSample sample = parse_chat_sample(test_case["sample"].dump(), "case");
      const TokenizedChat chat = tokenize_chat(tokenizer, chat_template, sample, {}, "case");
      INFO(test_case["sample"].dump());
      CHECK(chat.tokens == test_case["ids"].get<std::vector<std::int32_t>>());
      CHECK(chat.loss_mask == test_case["loss_mask"].get<std::vector<std::uint8_t>>());
    }
  }
  SECTION("loss covers assistant content and its <|im_end|>, nothing else") {
    const ChatSample sample = parse_chat_sample(
        R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q one"},
            {"role": "assistant", "content": "A one"}, {"role": "user", "content": "Q two"},
            {"role": "assistant", "content": "A two"}]})",
        "inline");
    const TokenizedChat chat = tokenize_chat(tokenizer, chat_template, sample, {}, "inline");
    CHECK(supervised_text(tokenizer, chat) ==
          "A one<|im_end|><think>\n\n</think>\n\nA two<|im_end|>");
    // The newline after each <|im_end|> is not supervised.
    const std::int32_t im_end = tokenizer.require_token_id("<|im_end|>");
    for (std::size_t i = 0; i + 1 < chat.tokens.size(); ++i) {
      if (chat.tokens[i] == im_end) CHECK(chat.loss_mask[i + 1] == 0);
    }
  }
  SECTION("template kwargs reach the template and move the assistant header") {
    const ChatSample sample = parse_chat_sample(
        R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]})",
        "inline");
    const ChatTemplateKwargs no_thinking = {{"enable_thinking", jinja::Value::boolean(false)}};
    const TokenizedChat chat =
        tokenize_chat(tokenizer, chat_template, sample, no_thinking, "inline");
    // With thinking off the empty think block is part of the prompt, so it carries no loss.
    CHECK(supervised_text(tokenizer, chat) == "A<|im_end|>");
    const ChatTemplateKwargs prompt = {{"add_generation_prompt", jinja::Value::boolean(true)}};
    const RenderedChat rendered = chat_template.render(sample, prompt, "inline");
    CHECK(rendered.text.ends_with("A<|im_end|>\n<|im_start|>assistant\n"));
  }
  SECTION("special tokens are matched before NFC, as HF does") {
    // '>' followed by U+0338 composes to U+226F under NFC; HF splits <think> off first.
    const ChatSample sample = parse_chat_sample(
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
        "\"content\": \"<think>\xcc\xb8 y\"}]}",
        "inline");
    const TokenizedChat chat = tokenize_chat(tokenizer, chat_template, sample, {}, "inline");
    const std::int32_t think = tokenizer.require_token_id("<think>");
    std::size_t think_count = 0;
    for (const std::int32_t id : chat.tokens) think_count += id == think ? 1 : 0;
    CHECK(think_count == 2);  // the template's own <think> and the one in the content
    const RenderedChat rendered = chat_template.render(sample, {}, "inline");
    CHECK(chat.tokens == tokenizer.encode(rendered.text));
  }
}

TEST_CASE("bad chat samples are data errors that say where and what", "[data][chat]") {
  const ChatTemplate chat_template = ChatTemplate::from_tokenizer(demo_tokenizer(), "demo");
  const auto expect_error = [&](const std::string& text, const std::string& needle) {
    try {
      const ChatSample sample = parse_chat_sample(text, "train.jsonl:7");
      chat_template.render(sample, {}, "train.jsonl:7");
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
  expect_error(
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                  "tools": {"not": "a list"}})",
      "\"tools\" must be a list");
}

TEST_CASE("ShareGPT conversations and mapped fields read like OpenAI messages", "[data][chat]") {
  const Tokenizer& tokenizer = demo_tokenizer();
  const ChatTemplate chat_template = ChatTemplate::from_tokenizer(tokenizer, "demo");
  const std::string openai =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
          {"role": "assistant", "content": "A"}, {"role": "tool", "content": "T"},
          {"role": "assistant", "content": "B"}]})";
  const std::string sharegpt =
      R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"},
          {"from": "gpt", "value": "A"}, {"from": "observation", "value": "T"},
          {"from": "gpt", "value": "B"}]})";
  const auto render = [&](const std::string& text, const ChatFieldMapping& mapping) {
    return chat_template.render(parse_chat_sample(text, "line", mapping), {}, "line").text;
  };
  CHECK(render(sharegpt, {}) == render(openai, {}));
  ChatFieldMapping mapping;
  mapping.messages_key = "dialog";
  mapping.role_key = "speaker";
  mapping.content_key = "text";
  mapping.role_names = {{"customer", "user"}, {"agent", "assistant"}};
  const std::string custom =
      R"({"dialog": [{"speaker": "system", "text": "S"}, {"speaker": "customer", "text": "Q"},
          {"speaker": "agent", "text": "A"}, {"speaker": "tool", "text": "T"},
          {"speaker": "agent", "text": "B"}]})";
  CHECK(render(custom, mapping) == render(openai, {}));
  // A ShareGPT function_call turn becomes an assistant tool call.
  const std::string call =
      R"({"conversations": [{"from": "human", "value": "Q"},
          {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": 1}}"},
          {"from": "observation", "value": "ok"}, {"from": "gpt", "value": "done"}]})";
  CHECK_THAT(render(call, {}),
             Catch::Contains("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}"));
}

TEST_CASE("a tokenizer without a chat template or with unsupported syntax is refused",
          "[data][chat]") {
  const Tokenizer& tokenizer = demo_tokenizer();
  try {
    ChatTemplate::from_source("line one\n{% include 'other.jinja' %}", tokenizer, "tok");
    FAIL("include must be refused");
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    CHECK_THAT(error.what(),
               Catch::Contains("tok: chat template line 2") && Catch::Contains("include"));
  }
  CHECK_THROWS_WITH(
      ChatTemplate::from_source("{{ x | no_such_filter }}", tokenizer, "tok"),
      Catch::Contains("line 1") && Catch::Contains("unsupported filter 'no_such_filter'"));
}
