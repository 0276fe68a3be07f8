// Random recipes drawn from the key table, through everything `dyncp-train --dry-run` does.
//
// Each recipe is the smoke recipe with a few keys set from their declarations (key_table.hpp):
//   typed:  every drawn key gets a value of its declared type and range; such a recipe either
//           validates (and then its resolved dump loads back to the same dump, and the dry-run
//           report runs to the end with the schedule contract holding) or is refused with an
//           exit-2 error naming a key path: cross-key rules may refuse what each key allows;
//   broken: one of the keys gets a value its declaration forbids (outside the range, the wrong
//           type, a choice not listed) or is misspelt; the recipe must be refused with exit 2
//           naming that key's path.
// Never another exception and never a crash. Seeded: a failure prints the recipe it drew.

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "config/key_table.hpp"
#include "config/resolve.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "train/dry_run.hpp"

using namespace dyncp;

namespace {

// The smoke recipe (configs/smoke/tiny_mock.yaml) as key path -> YAML value.
const std::map<std::string, std::string> base_recipe = {
    {"model.model_type", "qwen3_moe"},
    {"model.vocab_size", "512"},
    {"model.hidden_size", "64"},
    {"model.intermediate_size", "96"},
    {"model.num_hidden_layers", "2"},
    {"model.num_attention_heads", "4"},
    {"model.num_key_value_heads", "2"},
    {"model.head_dim", "24"},
    {"model.num_experts", "8"},
    {"model.num_experts_per_tok", "2"},
    {"model.moe_intermediate_size", "48"},
    {"model.context_parallel_size", "2"},
    {"model.expert_model_parallel_size", "2"},
    {"model.seq_length", "256"},
    {"model.dynamic_context_parallel", "true"},
    {"model.max_seqlen_per_dp_cp_rank", "128"},
    {"dataset.type", "mock_varlen"},
    {"dataset.mock_length_distribution", "lognormal(min=16,max=256,mean=96,sigma=0.8)"},
    {"dataset.mock_num_samples", "512"},
    {"tokenizer.tokenizer_type", "NullTokenizer"},
    {"train.global_batch_size", "16"},
    {"train.train_iters", "5"},
    {"dist.device", "cpu"},
};

// Keys whose values name files or folders: a random string there tests the file system, not
// the validator, and output folders would be created.
bool names_a_path(const config::KeySpec& spec) {
  for (const char* part : {"path", "dir", "save", "load", "export", "file", "model_name"}) {
    if (spec.path.find(part) != std::string::npos) return true;
  }
  return false;
}

template <typename T>
const T& pick(core::Rng& rng, const std::vector<T>& items) {
  return items[rng.below(items.size())];
}

// A value of the key's type and range, small sizes only (most keys are sizes).
std::string typed_value(const config::KeySpec& spec, core::Rng& rng) {
  if (spec.nullable && rng.below(6) == 0) return "null";
  switch (spec.type) {
    case config::KeyType::boolean:
      return rng.below(2) ? "true" : "false";
    case config::KeyType::integer: {
      // Sizes up to 4096: sizes near the declared maximum (2^31 - 1) pass the key's check and
      // make the dry run draw that many samples, which is minutes of work, not a property.
      std::vector<std::int64_t> candidates = {spec.min_integer};
      for (const std::int64_t v : {0, 1, 2, 3, 4, 8, 16, 24, 64, 128, 256, 1000, 4096})
        if (v >= spec.min_integer && v <= spec.max_integer) candidates.push_back(v);
      return std::to_string(pick(rng, candidates));
    }
    case config::KeyType::number:
      return pick(rng, std::vector<std::string>{"0", "0.5", "1", "1.0e-4", "0.999", "10", "-1"});
    case config::KeyType::string:
      return pick(rng, std::vector<std::string>{"\"\"", "x", "uniform(min=8,max=256)", "qwen3"});
    case config::KeyType::choice:
      return pick(rng, spec.choices);
    case config::KeyType::integer_list:
      return pick(rng, std::vector<std::string>{"[]", "[1]", "[1, 2]", "[4, 2]"});
    case config::KeyType::choice_list: {
      std::string list = "[";
      for (const std::string& choice : spec.choices) {
        if (rng.below(2)) list += (list.size() > 1 ? ", " : "") + choice;
      }
      return list + "]";
    }
  }
  return "null";
}

// A value the key's declaration forbids; empty when the type has none (any string is one).
std::string broken_value(const config::KeySpec& spec, core::Rng& rng) {
  switch (spec.type) {
    case config::KeyType::boolean:
      return pick(rng, std::vector<std::string>{"maybe", "2", "[true]"});
    case config::KeyType::integer: {
      std::vector<std::string> values = {"1.5", "twelve", "{a: 1}", "99999999999999999999999"};
      values.push_back(std::to_string(spec.min_integer - 1));
      if (spec.max_integer < INT64_MAX) values.push_back(std::to_string(spec.max_integer + 1));
      return pick(rng, values);
    }
    case config::KeyType::number:
      return pick(rng, std::vector<std::string>{"fast", "[1.0]", "{x: 2}"});
    case config::KeyType::string:
      return pick(rng, std::vector<std::string>{"[a, b]", "{a: 1}"});
    case config::KeyType::choice:
      return pick(rng, std::vector<std::string>{"not_a_choice", "[x]", "7"});
    case config::KeyType::integer_list: {
      std::vector<std::string> values = {"[a]", "[1.5]", "{a: 1}"};
      values.push_back("[" + std::to_string(spec.min_integer - 1) + "]");
      return pick(rng, values);
    }
    case config::KeyType::choice_list:
      return pick(rng, std::vector<std::string>{"[not_a_choice]", "{a: 1}"});
  }
  return "";
}

// Nested YAML from key path -> value.
std::string to_yaml(const std::map<std::string, std::string>& recipe) {
  std::string text;
  std::vector<std::string> open;  // the sections of the previous key
  for (const auto& [path, value] : recipe) {
    std::vector<std::string> parts;
    std::stringstream split(path);
    for (std::string part; std::getline(split, part, '.');) parts.push_back(part);
    std::size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common])
      ++common;
    for (std::size_t depth = common; depth + 1 < parts.size(); ++depth)
      text += std::string(2 * depth, ' ') + parts[depth] + ":\n";
    text += std::string(2 * (parts.size() - 1), ' ') + parts.back() + ": " + value + "\n";
    open.assign(parts.begin(), parts.end() - 1);
  }
  return text;
}

struct Outcome {
  bool valid = false;
  int exit_code = 0;
  std::string message;
};

Outcome load_and_dry_run(const std::string& yaml, std::int64_t world_size) {
  Outcome outcome;
  try {
    auto config = config::load_config_text(yaml, {}, "random.yaml");
    config::resolve_config(config, world_size);
    // The resolved dump is a recipe that gives the same configuration.
    const std::string dump = config::dump_config_yaml(config);
    auto reloaded = config::load_config_text(dump, {}, "dump.yaml");
    config::resolve_config(reloaded, world_size);
    if (config::dump_config_yaml(reloaded) != dump) {
      outcome.message = "the resolved dump does not load back to itself:\n" + dump;
      outcome.exit_code = -1;
      return outcome;
    }
    std::ostringstream report;
    if (!train::write_dry_run_report(report, config)) {
      outcome.message = "the dry run's schedule breaks the contract:\n" + report.str();
      outcome.exit_code = -1;
      return outcome;
    }
    outcome.valid = true;
  } catch (const core::Error& error) {
    outcome.exit_code = error.exit_code();
    outcome.message = error.what();
  }
  return outcome;
}

bool names_a_key_path(const std::string& message) {
  for (const std::string& name : config::all_key_names()) {
    if (message.find(name) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("random recipes from the key table: typed ones validate or are refused naming a key",
          "[train][config][property]") {
  std::vector<const config::KeySpec*> keys;
  for (const config::KeySpec& spec : config::key_table()) {
    if (!names_a_path(spec)) keys.push_back(&spec);
  }
  REQUIRE(keys.size() > 50);
  core::Rng rng(16, core::RngPurpose::test);
  int valid = 0, refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    auto recipe = base_recipe;
    const int drawn = 1 + static_cast<int>(rng.below(3));
    for (int k = 0; k < drawn; ++k) {
      const config::KeySpec& spec = *pick(rng, keys);
      recipe[spec.path] = typed_value(spec, rng);
    }
    const std::int64_t world_size = pick(rng, std::vector<std::int64_t>{1, 2, 4, 8});
    const std::string yaml = to_yaml(recipe);
    INFO("trial " << trial << ", world size " << world_size << ":\n" << yaml);
    const Outcome outcome = load_and_dry_run(yaml, world_size);
    INFO(outcome.message);
    if (outcome.valid) {
      ++valid;
      continue;
    }
    REQUIRE(outcome.exit_code == 2);
    CHECK(names_a_key_path(outcome.message));
    ++refused;
  }
  // Both outcomes are reached: the draws are neither all valid nor all refused.
  CHECK(valid > 80);
  CHECK(refused > 40);
}

TEST_CASE(
    "random recipes from the key table: a forbidden value or a misspelt key is refused "
    "naming it",
    "[train][config][property]") {
  core::Rng rng(1616, core::RngPurpose::test);
  const auto& table = config::key_table();
  int trials = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const config::KeySpec& spec = table[rng.below(table.size())];
    auto recipe = base_recipe;
    std::string named = spec.path;
    if (rng.below(5) == 0) {
      // Misspelt: one letter dropped from the last part of the path.
      const std::size_t cut =
          spec.path.rfind('.') + 1 + rng.below(spec.path.size() - spec.path.rfind('.') - 1);
      named = spec.path.substr(0, cut) + spec.path.substr(cut + 1);
      if (config::find_key(named) != nullptr || config::find_inert_key(named) != nullptr) continue;
      recipe[named] = "1";
    } else {
      recipe[spec.path] = broken_value(spec, rng);
    }
    const std::string yaml = to_yaml(recipe);
    INFO("trial " << trial << ": " << named << " = " << recipe[named] << "\n" << yaml);
    const Outcome outcome = load_and_dry_run(yaml, 4);
    INFO(outcome.message);
    REQUIRE_FALSE(outcome.valid);
    CHECK(outcome.exit_code == 2);
    CHECK(outcome.message.find(named) != std::string::npos);
    ++trials;
  }
  CHECK(trials > 330);
}
