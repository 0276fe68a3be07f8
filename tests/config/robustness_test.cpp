// Corrupted recipes and overrides must end in a config error (exit 2), never in another
// exception or a crash. Mutations are seeded, so a failure reproduces.

#include <catch2/catch.hpp>
#include <string>

#include "config_test_helpers.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

using namespace dyncp;

namespace {

// Replace, insert or delete a few characters, drawing from characters YAML cares about.
std::string mutate(const std::string& text, core::Rng& rng) {
  static const std::string alphabet = ":-[]{}#'\"\n \t,.!&*|>%@`0123456789abcnull~";
  std::string out = text;
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int i = 0; i < edits && !out.empty(); ++i) {
    const auto position = static_cast<std::size_t>(rng.below(out.size()));
    const char c = alphabet[rng.below(alphabet.size())];
    switch (rng.below(3)) {
      case 0:
        out[position] = c;
        break;
      case 1:
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(position), c);
        break;
      default:
        out.erase(position, 1 + rng.below(8));
        break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("corrupted recipes fail with a config error, never another exception", "[config]") {
  core::Rng rng(2024, core::RngPurpose::test);
  int rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const std::string text = mutate(config::test::valid_recipe, rng);
    try {
      auto config = config::load_config_text(text, {}, "mutated.yaml");
      config::resolve_config(config, 4);
    } catch (const core::Error& error) {
      INFO(text);
      CHECK(error.exit_code() == 2);
      CHECK_FALSE(std::string(error.what()).empty());
      ++rejected;
    } catch (const std::exception& error) {
      INFO(text);
      FAIL("unexpected exception: " << error.what());
    }
  }
  CHECK(rejected > 100);  // the mutations do reach the error paths
}

TEST_CASE("odd override values fail with a config error", "[config]") {
  for (const char* override_text :
       {"model.seq_length=", "model.seq_length=[", "model.seq_length=[1]",
        "model.seq_length={a: 1}", "model.mlp_only_layers=[[1]]", "model.mlp_only_layers=[a, b]",
        "model.layer_types=[x]", "optimizer.lr=nan", "optimizer.lr=-inf", "model.seq_length=0x10",
        "model.seq_length= 8", "model.seq_length=+", "model..seq_length=8", ".=1",
        "train.train_iters=\"\"", "model.dynamic_context_parallel=1"}) {
    INFO(override_text);
    CHECK_THROWS_AS(config::test::resolved({override_text}), core::Error);
  }
}
