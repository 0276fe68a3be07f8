// The Jinja interpreter construct by construct against the reference environment transformers
// renders chat templates with (fixture by tools/golden/data/make_jinja_cases.py), plus the
// Python number and JSON spellings templates print.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "data/jinja_builtins.hpp"
#include "data/jinja_template.hpp"
#include "test_paths.hpp"

using namespace dyncp::data::jinja;
using dyncp::data::test::fixture_path;
using dyncp::data::test::read_file;

TEST_CASE("each construct renders as transformers' Jinja environment does", "[data][jinja]") {
  const auto fixture = nlohmann::json::parse(read_file(fixture_path("jinja_cases.json")));
  REQUIRE(fixture["cases"].size() >= 60);
  for (const auto& test_case : fixture["cases"]) {
    const std::string source = test_case["template"].get<std::string>();
    const Value context = parse_json_value(test_case["context"].get<std::string>());
    INFO("template: " << source);
    if (test_case.contains("error")) {
      INFO("reference error: " << test_case["error"].get<std::string>());
      try {
        const Template parsed = Template::parse(source, "case");
        parsed.render(*context.dict_ptr(), "case");
        FAIL("expected an error");
      } catch (const dyncp::core::Error& error) {
        CHECK(error.exit_code() == 2);
      }
      continue;
    }
    const Template parsed = Template::parse(source, "case");
    CHECK(parsed.render(*context.dict_ptr(), "case").text ==
          test_case["output"].get<std::string>());
  }
}

TEST_CASE("template errors name the template line and raise_exception's message", "[data][jinja]") {
  const Value context = Value::new_dict();
  try {
    Template::parse("one\ntwo\n{{ 'x' + 1 }}", "tpl").render(*context.dict_ptr(), "sample.jsonl:3");
    FAIL("expected an error");
  } catch (const dyncp::core::Error& error) {
    CHECK_THAT(error.what(), Catch::Contains("sample.jsonl:3") &&
                                 Catch::Contains("tpl: chat template line 3") &&
                                 Catch::Contains("can only concatenate str"));
  }
  try {
    Template::parse("{% if true %}\n{{ raise_exception('roles must alternate') }}{% endif %}",
                    "tpl")
        .render(*context.dict_ptr(), "sample.jsonl:9");
    FAIL("expected an error");
  } catch (const dyncp::core::Error& error) {
    CHECK_THAT(error.what(), Catch::Contains("sample.jsonl:9") &&
                                 Catch::Contains("roles must alternate") &&
                                 Catch::Contains("line 2"));
  }
  CHECK_THROWS_WITH(Template::parse("{% for x in y %}no end", "tpl"), Catch::Contains("endfor"));
  // Unbounded recursion is a data error, not a stack overflow (jinja2: RecursionError).
  CHECK_THROWS_WITH(Template::parse("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "tpl")
                        .render(*context.dict_ptr(), "deep"),
                    Catch::Contains("more than 100 macro calls"));
  const Value cyclic = parse_json_value(R"({"t": [{"c": []}]})");
  CHECK_NOTHROW(Template::parse("{% for x in t recursive %}{{ loop(x.c) }}{% endfor %}", "tpl")
                    .render(*cyclic.dict_ptr(), "shallow"));
  CHECK_THROWS_WITH(Template::parse("a\n{% include 'other.jinja' %}", "tpl"),
                    Catch::Contains("line 2") && Catch::Contains("needs a template loader"));
  // The whole character, not its first byte.
  CHECK_THROWS_WITH(Template::parse("{{ a é }}", "tpl"),
                    Catch::Contains("unexpected character 'é' in a tag"));
  CHECK_THROWS_WITH(Template::parse("{% do x.append(1) %}", "tpl"),
                    Catch::Contains("unsupported statement {% do %}"));
  CHECK_THROWS_WITH(Template::parse("a\n\n{% raw %}{{ x }}", "tpl"),
                    Catch::Contains("line 3") && Catch::Contains("endraw"));
  CHECK_THROWS_WITH(Template::parse("{{ x is frobnicated }}", "tpl"),
                    Catch::Contains("unsupported test"));
}

TEST_CASE("Python float repr and json.dumps numbers", "[data][jinja]") {
  CHECK(python_float_repr(1e15) == "1000000000000000.0");
  CHECK(python_float_repr(1234567890123456.0) == "1234567890123456.0");
  CHECK(python_float_repr(1e16) == "1e+16");
  CHECK(python_float_repr(1.5e-7) == "1.5e-07");
  CHECK(python_float_repr(0.0001) == "0.0001");
  CHECK(python_float_repr(0.00001) == "1e-05");
  CHECK(python_float_repr(-0.0) == "-0.0");
  CHECK(python_float_repr(0.1) == "0.1");
  CHECK(python_float_repr(1e100) == "1e+100");
  CHECK(python_float_repr(123.456e5) == "12345600.0");
  CHECK(python_json_dumps(Value::floating(std::nan(""))) == "NaN");
  // Integers beyond 64 bits keep every digit, as Python's json does.
  const Value parsed =
      parse_json_value(R"({"a": 123456789012345678901234567890, "b": 18446744073709551616,
                                            "c": -98765432109876543210, "d": 9007199254740993, "e": 2.50})");
  CHECK(
      python_json_dumps(parsed) ==
      R"({"a": 123456789012345678901234567890, "b": 18446744073709551616, "c": -98765432109876543210, "d": 9007199254740993, "e": 2.5})");
}

namespace {

std::vector<std::string> names(const nlohmann::json& list) {
  return list.get<std::vector<std::string>>();
}

// What jinja2 provides that the interpreter refuses, and why (docs/data.md lists the same).
const std::set<std::string> refused_builtins = {};

}  // namespace

TEST_CASE("jinja2's built-in filters, tests, globals and statements render as jinja2 renders them",
          "[data][jinja]") {
  // Fixture by tools/golden/data/make_jinja_builtin_cases.py: each case rendered by jinja2 in
  // transformers' chat-template environment.
  const auto fixture = nlohmann::json::parse(read_file(fixture_path("jinja_builtin_cases.json")));
  std::set<std::string> covered;
  std::size_t failures = 0;
  for (const auto& test_case : fixture["cases"]) {
    const std::string source = test_case["template"].get<std::string>();
    const Value context = parse_json_value(test_case["context"].get<std::string>());
    std::istringstream covers(test_case["covers"].get<std::string>());
    for (std::string item; covers >> item;) covered.insert(item);
    INFO("covers " << test_case["covers"].get<std::string>() << ", template: " << source);
    if (test_case.contains("error")) {
      INFO("jinja2 error: " << test_case["error"].get<std::string>());
      try {
        Template::parse(source, "case").render(*context.dict_ptr(), "case");
        FAIL_CHECK("expected an error");
        ++failures;
      } catch (const dyncp::core::Error& error) {
        CHECK(error.exit_code() == 2);
      }
      continue;
    }
    try {
      const std::string text =
          Template::parse(source, "case").render(*context.dict_ptr(), "case").text;
      CHECK(text == test_case["output"].get<std::string>());
      failures += text == test_case["output"].get<std::string>() ? 0 : 1;
    } catch (const dyncp::core::Error& error) {
      FAIL_CHECK("refused: " << error.what());
      ++failures;
    }
  }
  CHECK(failures == 0);
  // Every filter and test jinja2 has is built (and covered by a case) or refused on purpose.
  for (const std::string& filter : names(fixture["filters"])) {
    INFO("filter " << filter);
    if (refused_builtins.contains("filter:" + filter)) {
      CHECK_FALSE(is_known_filter(filter));
      continue;
    }
    CHECK(is_known_filter(filter));
    CHECK(covered.contains("filter:" + filter));
  }
  for (const std::string& test : names(fixture["tests"])) {
    INFO("test " << test);
    CHECK(is_known_test(test));
    CHECK(covered.contains("test:" + test));
  }
  for (const std::string& global : names(fixture["globals"])) {
    INFO("global " << global);
    CHECK(covered.contains("global:" + global));
  }
}
