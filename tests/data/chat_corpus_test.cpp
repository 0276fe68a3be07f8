// The golden corpus (tools/golden/data/make_chat_corpus.py): real chat templates rendered and
// tokenized by transformers; text, ids and (for {% generation %} templates) the assistant mask
// must come out exactly, and conversations a template refuses must be refused here too. For the
// Phi templates the fixture also holds the loss mask read from transformers' renderings of each
// conversation's prefixes (make_chat_corpus.py: prefix_loss_mask), which must come out exactly.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/chat_json.hpp"
#include "data/chat_template.hpp"
#include "data/dataset_source.hpp"
#include "test_paths.hpp"

using namespace dyncp::data;
using dyncp::data::test::fixture_path;
using dyncp::data::test::read_file;

namespace {

std::string supervised(const Tokenizer& tokenizer, const TokenizedChat& chat) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < chat.tokens.size(); ++i) {
    if (chat.loss_mask[i]) ids.push_back(chat.tokens[i]);
  }
  return tokenizer.decode(ids);
}

void check_corpus(const std::string& name) {
  const auto directory = fixture_path("chat_corpus") / name;
  const Tokenizer tokenizer = Tokenizer::from_directory(directory);
  const ChatTemplate chat_template = ChatTemplate::from_tokenizer(tokenizer, name);
  const auto fixture = nlohmann::json::parse(read_file(directory / "cases.json"));
  std::size_t rendered = 0;
  std::size_t masked = 0;
  std::size_t index = 0;
  for (const auto& test_case : fixture["cases"]) {
    const std::string where = name + " case " + std::to_string(index++);
    const std::string sample_text = test_case["sample"].get<std::string>();
    INFO(where << ": " << sample_text << " kwargs " << test_case["kwargs"].dump());
    const ChatTemplateKwargs kwargs = parse_template_kwargs(test_case["kwargs"].dump(), where);
    if (test_case.contains("error")) {
      try {
        const ChatSample sample = parse_chat_sample(sample_text, where);
        chat_template.render(sample, kwargs, where);
        FAIL("transformers refused this conversation: " << test_case["error"].get<std::string>());
      } catch (const dyncp::core::Error& error) {
        CHECK(error.exit_code() == 2);
      }
      continue;
    }
    const ChatSample sample = parse_chat_sample(sample_text, where);
    const RenderedChat text = chat_template.render(sample, kwargs, where);
    CHECK(text.text == test_case["text"].get<std::string>());
    const TokenizedChat chat = tokenize_chat(tokenizer, chat_template, sample, kwargs, where);
    CHECK(chat.tokens == test_case["ids"].get<std::vector<std::int32_t>>());
    if (test_case.contains("assistant_mask")) {
      CHECK(chat.loss_mask == test_case["assistant_mask"].get<std::vector<std::uint8_t>>());
    }
    if (test_case.contains("loss_mask")) {
      CHECK(chat.loss_mask == test_case["loss_mask"].get<std::vector<std::uint8_t>>());
      ++masked;
    }
    ++rendered;
  }
  CHECK(rendered >= 30);
  if (fixture["cases"][0].contains("loss_mask")) CHECK(masked == rendered);
}

TokenizedChat tokenize_line(const std::string& name, const std::string& line) {
  const auto directory = fixture_path("chat_corpus") / name;
  const Tokenizer tokenizer = Tokenizer::from_directory(directory);
  const ChatTemplate chat_template = ChatTemplate::from_tokenizer(tokenizer, name);
  return tokenize_chat(tokenizer, chat_template, parse_chat_sample(line, name), {}, name);
}

std::string supervised_line(const std::string& name, const std::string& line) {
  const auto directory = fixture_path("chat_corpus") / name;
  const Tokenizer tokenizer = Tokenizer::from_directory(directory);
  return supervised(tokenizer, tokenize_line(name, line));
}

const char* const two_turns =
    R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Ciao"}]})";

}  // namespace

TEST_CASE("golden corpus: Qwen3", "[data][chat][corpus]") {
  check_corpus("qwen3");
}
TEST_CASE("golden corpus: Qwen2.5", "[data][chat][corpus]") {
  check_corpus("qwen2_5");
}
TEST_CASE("golden corpus: Qwen3.5 MoE", "[data][chat][corpus]") {
  check_corpus("qwen3_5_moe");
}
TEST_CASE("golden corpus: Llama 3.2", "[data][chat][corpus]") {
  check_corpus("llama3_2");
}
TEST_CASE("golden corpus: Mistral Nemo", "[data][chat][corpus]") {
  check_corpus("mistral_nemo");
}
TEST_CASE("golden corpus: DeepSeek-R1", "[data][chat][corpus]") {
  check_corpus("deepseek_r1");
}
TEST_CASE("golden corpus: Gemma", "[data][chat][corpus]") {
  check_corpus("gemma");
}
// Unprompted, these end the conversation with eos; prompted, they add the assistant header.
TEST_CASE("golden corpus: Phi-3.5-mini", "[data][chat][corpus]") {
  check_corpus("phi3_5_mini");
}
TEST_CASE("golden corpus: Phi-4-mini", "[data][chat][corpus]") {
  check_corpus("phi4_mini");
}
TEST_CASE("golden corpus: generation blocks give transformers' assistant mask",
          "[data][chat][corpus]") {
  check_corpus("chatml_generation");
}

TEST_CASE("without generation blocks the loss is each assistant turn after its header",
          "[data][chat][corpus]") {
  CHECK(supervised_line("llama3_2", two_turns) == "Hello<|eot_id|>Ciao<|eot_id|>");
  CHECK(supervised_line("gemma", two_turns) == "Hello<end_of_turn>Ciao<end_of_turn>");
  CHECK(supervised_line("mistral_nemo", two_turns) == "Hello</s>Ciao</s>");
  CHECK(supervised_line("deepseek_r1", two_turns) ==
        "Hello<｜end▁of▁sentence｜>Ciao<｜end▁of▁sentence｜>");
  CHECK(supervised_line("qwen2_5", two_turns) == "Hello<|im_end|>Ciao<|im_end|>");
  // The header is where the prompted and unprompted renderings part, not a suffix of one:
  // neither the header nor the closing eos is trained.
  CHECK(supervised_line("phi3_5_mini", two_turns) == "Hello<|end|>Ciao<|end|>");
  CHECK(supervised_line("phi4_mini", two_turns) == "Hello<|end|>Ciao<|end|>");
  // Qwen3.5 prompts with "<think>\n": the reasoning of the last turn is trained, the
  // opening tag is not; the earlier turn keeps only its answer. (The empty reasoning's "\n"
  // shares a "\n\n" token with the header's, so that token stays prompt.)
  CHECK(supervised_line("qwen3_5_moe", two_turns) == "Hello<|im_end|></think>\n\nCiao<|im_end|>");
}

TEST_CASE("per-sample chat_template_kwargs render as transformers does with those kwargs",
          "[data][chat][corpus]") {
  // Llama 3.2's cases with kwargs (date_string, tools_in_user_message), each rendered by
  // transformers: moved into the sample's own "chat_template_kwargs" they give the same text,
  // and they win over different dataset-level kwargs.
  const auto directory = fixture_path("chat_corpus") / "llama3_2";
  const Tokenizer tokenizer = Tokenizer::from_directory(directory);
  const ChatTemplate chat_template = ChatTemplate::from_tokenizer(tokenizer, "llama3_2");
  const auto fixture = nlohmann::json::parse(read_file(directory / "cases.json"));
  const ChatTemplateKwargs dataset_kwargs =
      parse_template_kwargs(R"({"date_string": "01 Jan 1999"})", "dataset");
  std::size_t checked = 0;
  for (const auto& test_case : fixture["cases"]) {
    if (test_case.contains("error") || test_case["kwargs"].empty()) continue;
    // Spliced in as text, so the sample's own number spellings stay as they are.
    std::string line = test_case["sample"].get<std::string>();
    REQUIRE(line.front() == '{');
    line.insert(1, "\"chat_template_kwargs\": " + test_case["kwargs"].dump() + ", ");
    INFO(line);
    const ChatSample sample = parse_chat_sample(line, "per-sample");
    CHECK(chat_template.render(sample, {}, "per-sample").text == test_case["text"]);
    CHECK(chat_template.render(sample, dataset_kwargs, "per-sample").text == test_case["text"]);
    ++checked;
  }
  CHECK(checked >= 10);
  CHECK_THROWS_WITH(parse_chat_sample(R"({"messages": [{"role": "assistant", "content": "x"}],
                                         "chat_template_kwargs": [1]})",
                                      "bad"),
                    Catch::Contains("chat_template_kwargs"));
}
