#include "data/tokenizer.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/pre_tokenizer.hpp"
#include "test_paths.hpp"

using dyncp::data::Tokenizer;
using dyncp::data::test::fixture_path;
using dyncp::data::test::qwen3_tokenizer;
using dyncp::data::test::read_file;

TEST_CASE("qwen3 tokenizer (loaded once for all sections)", "[data][tokenizer][qwen3]") {
  SECTION("qwen3 tokenizer is token-exact with HF tokenizers on the fixture corpus") {
    const auto fixture =
        nlohmann::json::parse(read_file(fixture_path("qwen3_tokenizer_cases.json")));
    const Tokenizer& tokenizer = qwen3_tokenizer();
    REQUIRE(fixture["cases"].size() > 40);
    for (const auto& test_case : fixture["cases"]) {
      const std::string text = test_case["text"].get<std::string>();
      const auto expected = test_case["ids"].get<std::vector<std::int32_t>>();
      INFO("text: " << text);
      CHECK(tokenizer.encode(text) == expected);
    }
  }
  SECTION("qwen3 decode(encode(x)) == x for NFC text") {
    const auto fixture =
        nlohmann::json::parse(read_file(fixture_path("qwen3_tokenizer_cases.json")));
    const Tokenizer& tokenizer = qwen3_tokenizer();
    for (const auto& test_case : fixture["cases"]) {
      const std::string text = tokenizer.normalize(test_case["text"].get<std::string>());
      INFO("text: " << text);
      CHECK(tokenizer.decode(tokenizer.encode(text)) == text);
    }
  }
  SECTION("qwen3 special ids and pad token come from the tokenizer files") {
    const Tokenizer& tokenizer = qwen3_tokenizer();
    CHECK(tokenizer.require_token_id("<|endoftext|>") == 151643);
    CHECK(tokenizer.require_token_id("<|im_start|>") == 151644);
    CHECK(tokenizer.require_token_id("<|im_end|>") == 151645);
    CHECK(tokenizer.require_token_id("</think>") == 151668);
    CHECK(tokenizer.pad_token_id() == 151643);
    CHECK(tokenizer.eos_token_id() == 151645);
    CHECK(tokenizer.vocab_size() == 151669);
    CHECK(tokenizer.encode("\n") == std::vector<std::int32_t>{198});
    CHECK(tokenizer.encode("\n\n") == std::vector<std::int32_t>{271});
    CHECK(tokenizer.chat_template().find("<|im_start|>") != std::string::npos);
  }
  SECTION("offsets point at each token's first byte") {
    const Tokenizer& tokenizer = qwen3_tokenizer();
    const std::string text = "<|im_start|>user\nHello, world 123<|im_end|>\n";
    const auto encoding = tokenizer.encode_with_offsets(text);
    REQUIRE(encoding.ids.size() == encoding.offsets.size());
    CHECK(encoding.ids == tokenizer.encode(text));
    for (std::size_t i = 0; i < encoding.ids.size(); ++i) {
      const std::string piece = tokenizer.decode(std::span(&encoding.ids[i], 1));
      CHECK(text.compare(encoding.offsets[i], piece.size(), piece) == 0);
    }
  }
  SECTION("decode can skip special tokens") {
    const Tokenizer& tokenizer = qwen3_tokenizer();
    const auto ids = tokenizer.encode("<|im_start|>hi<|im_end|>");
    CHECK(tokenizer.decode(ids, true) == "hi");
  }
  SECTION("invalid UTF-8 is a data error with the byte offset") {
    const Tokenizer& tokenizer = qwen3_tokenizer();
    for (const std::string& bad : {std::string("ok\xff"), std::string("ab\xc3"),
                                   std::string("\xed\xa0\x80"), std::string("\xc0\xaf")}) {
      try {
        tokenizer.encode(bad, "input.txt");
        FAIL("expected an error");
      } catch (const dyncp::core::Error& error) {
        CHECK(error.exit_code() == 2);
        CHECK_THAT(error.what(),
                   Catch::Contains("input.txt") && Catch::Contains("invalid UTF-8 at byte"));
      }
    }
  }
  SECTION("decode rejects ids outside the vocabulary") {
    const std::vector<std::int32_t> ids{1, 999999};
    REQUIRE_THROWS_WITH(qwen3_tokenizer().decode(ids), Catch::Contains("outside the vocabulary"));
  }
}

TEST_CASE("unsupported tokenizer.json layouts are rejected naming the field", "[data][tokenizer]") {
  REQUIRE_THROWS_WITH(Tokenizer::from_json(R"({"model": {"type": "WordPiece"}})", "", "tok.json"),
                      Catch::Contains("model.type"));
  REQUIRE_THROWS_WITH(Tokenizer::from_json("{not json", "", "tok.json"),
                      Catch::Contains("invalid JSON"));
}

TEST_CASE("oniguruma whitespace classes are translated to White_Space", "[data][tokenizer]") {
  const std::string translated =
      dyncp::data::translate_oniguruma_pattern(R"(\s+(?!\S)|[^\s\p{L}])");
  CHECK(translated.find("\\x{85}") != std::string::npos);
  CHECK(translated.find("\\s") == std::string::npos);
  CHECK(translated.find("\\S") == std::string::npos);
}

TEST_CASE("demo tokenizer is token-exact with HF tokenizers and fits a 512-token vocabulary",
          "[data][tokenizer][demo]") {
  const auto directory = fixture_path("demo") / "tokenizer";
  const Tokenizer tokenizer = Tokenizer::from_directory(directory);
  CHECK(tokenizer.vocab_size() <= 512);
  CHECK(tokenizer.pad_token_id() == tokenizer.require_token_id("<|endoftext|>"));
  const auto fixture = nlohmann::json::parse(read_file(fixture_path("demo_tokenizer_cases.json")));
  REQUIRE(fixture["cases"].size() > 50);
  for (const auto& test_case : fixture["cases"]) {
    const std::string text = test_case["text"].get<std::string>();
    INFO("text: " << text);
    const auto ids = tokenizer.encode(text);
    CHECK(ids == test_case["ids"].get<std::vector<std::int32_t>>());
    CHECK(tokenizer.decode(ids) == tokenizer.normalize(text));
  }
}

TEST_CASE("NullTokenizer reads token ids only", "[data][tokenizer]") {
  const Tokenizer tokenizer = Tokenizer::null_tokenizer(100);
  CHECK(tokenizer.is_null());
  CHECK(tokenizer.vocab_size() == 100);
  CHECK(tokenizer.pad_token_id() == 0);
  CHECK_FALSE(tokenizer.token_id("<|im_end|>").has_value());
  CHECK_THROWS_WITH(tokenizer.encode("text"), Catch::Contains("NullTokenizer"));
  const std::vector<std::int32_t> ids = {1, 2};
  CHECK_THROWS_WITH(tokenizer.decode(ids), Catch::Contains("NullTokenizer"));
  CHECK(Tokenizer::null_tokenizer(101).content_hash() != tokenizer.content_hash());
}
