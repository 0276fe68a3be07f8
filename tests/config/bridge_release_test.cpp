// Megatron-Bridge dumps of each Bridge release the field table was generated from
// (tests/fixtures/bridge/releases/, the pretraining recipe as each release dumps it): they load
// with no unknown key and give the same configuration as the newest release's dump; the fields
// that differ between releases are classified like any other; a key no release has is unknown.

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/bridge_fields.hpp"
#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/error.hpp"

using namespace dyncp::config;

namespace {

std::string fixture_path(const std::string& name) {
  return std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/bridge/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The releases with a dump in releases/ (every release of the table but the newest, whose
// dumps are the fixtures one folder up).
std::vector<std::string> older_releases() {
  std::vector<std::string> labels;
  for (const auto& release : bridge_releases()) {
    if (release.label != bridge_dynamic_cp_label && release.label != bridge_dump_release()) {
      labels.emplace_back(release.label);
    }
  }
  return labels;
}

std::string release_dump(const std::string& label) {
  return read_text(fixture_path("releases/qwen3_30b_a3b_pretrain_dynamic_cp_" + label + ".yaml"));
}

ConfigContainer load_text(const std::string& text) {
  static const bool cache = ::setenv("HF_HUB_CACHE", fixture_path("hf_cache").c_str(), 1) == 0;
  REQUIRE(cache);
  return load_config_text(text, {}, "dump.yaml");
}

std::string error_of(const std::string& text) {
  try {
    auto config = load_text(text);
    resolve_config(config, 16);
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    return error.what();
  }
  return "";
}

// Replace `key: old` inside the top-level `section:` of a dump.
std::string edit(std::string text, const std::string& section, const std::string& key,
                 const std::string& old_value, const std::string& new_value) {
  const auto start = text.find("\n" + section + ":\n");
  REQUIRE(start != std::string::npos);
  const std::string needle = "\n  " + key + ": " + old_value + "\n";
  const auto at = text.find(needle, start);
  INFO(section << "." << key << ": " << old_value);
  REQUIRE(at != std::string::npos);
  text.replace(at, needle.size(), "\n  " + key + ": " + new_value + "\n");
  return text;
}

bool in_release(const std::string& path, const std::string& label,
                std::string_view class_name = {}) {
  for (const auto& field : bridge_fields()) {
    if (field.path() == path && field.in_release(label) &&
        (class_name.empty() || field.class_name == class_name)) {
      return true;
    }
  }
  return false;
}

bool lists(const ConfigContainer& config, const std::string& setting) {
  for (const auto& inert : config.bridge_inert_settings) {
    if (inert == setting) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("the Bridge field table records the releases it was read from", "[config][bridge]") {
  std::set<std::string> labels;
  for (const auto& release : bridge_releases()) {
    INFO(release.label);
    CHECK(!release.sources.empty());
    labels.emplace(release.label);
  }
  // Every release of the last three Bridge release lines and the dynamic-CP fields of PR #6127.
  for (const char* label :
       {"0.4.0", "0.4.1", "0.4.2", "0.5.0", "0.5.1", "0.6.0", "0.6.2", "pr6127"}) {
    CHECK(labels.count(label) == 1);
  }
  CHECK(bridge_dump_release() == "0.6.2");
  std::map<std::string, std::size_t> per_release;
  for (const auto& field : bridge_fields()) {
    INFO(field.path() << " in " << field.releases);
    REQUIRE(!field.releases.empty());
    std::istringstream in{std::string(field.releases)};
    std::string label;
    while (in >> label) {
      CHECK(labels.count(label) == 1);
      ++per_release[label];
    }
  }
  for (const auto& label : labels) {
    if (label == bridge_dynamic_cp_label) continue;
    INFO(label);
    CHECK(per_release[label] > 700);
  }
}

TEST_CASE("fields added, renamed or dropped by a release are known with their releases",
          "[config][bridge]") {
  // Megatron-Core 0.18 renamed muon_use_nesterov to muon_nesterov.
  CHECK(bridge_field_releases("optimizer.muon_use_nesterov") == "0.4.0 0.4.1 0.4.2");
  CHECK(!in_release("optimizer.muon_nesterov", "0.4.2"));
  CHECK(in_release("optimizer.muon_nesterov", "0.6.2"));
  // Bridge 0.5 dropped tiktoken_special_tokens.
  CHECK(bridge_field_releases("tokenizer.tiktoken_special_tokens") == "0.4.0 0.4.1 0.4.2");
  // GPTDatasetConfig.seq_length became a field in 0.6 (a property over sequence_length before).
  CHECK(!in_release("dataset.seq_length", "0.5.1", "GPTDatasetConfig"));
  CHECK(in_release("dataset.seq_length", "0.5.1", "FinetuningDatasetConfig"));
  CHECK(in_release("dataset.seq_length", "0.6.0", "GPTDatasetConfig"));
  CHECK(in_release("dataset.sequence_length", "0.4.2", "GPTDatasetConfig"));
  CHECK(bridge_field_releases("model.hf_model_revision") == "0.6.0 0.6.2");
  CHECK(bridge_field_releases("dataset.packed_sequence_specs") == "0.4.0 0.4.1 0.4.2 0.5.0 0.5.1");
  // A default that changed: both releases' defaults are Bridge defaults.
  const auto defaults = bridge_field_defaults("model.cuda_graph_use_single_mempool");
  CHECK(std::set<std::string>(defaults.begin(), defaults.end()) ==
        std::set<std::string>{"true", "false"});
  CHECK(bridge_field_releases("optimizer.no_such_field").empty());
}

TEST_CASE("a refused Bridge field accepts its default only where every release agrees on it",
          "[config][bridge]") {
  std::vector<std::string> ambiguous;
  for (const auto& field : bridge_fields()) {
    const auto* rule = classify_bridge_field(field.path());
    REQUIRE(rule != nullptr);
    if (rule->kind != BridgeFieldClass::refused || !rule->accepted.empty()) continue;
    if (bridge_field_defaults(field.path(), field.class_name).size() != 1) {
      ambiguous.push_back(field.path());
    }
  }
  INFO("refused fields whose default differs between releases (list the supported values): "
       << (ambiguous.empty() ? "" : ambiguous.front()));
  CHECK(ambiguous.empty());
}

TEST_CASE("each Bridge release's dump loads to the newest release's configuration",
          "[config][bridge]") {
  auto newest = load_text(read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml")));
  resolve_config(newest, 16);
  const auto expected = dump_config_yaml(newest);
  REQUIRE(older_releases().size() >= 6);
  for (const auto& label : older_releases()) {
    INFO("Bridge " << label);
    const auto text = release_dump(label);
    const auto message = error_of(text);
    CHECK(message.find("unknown key") == std::string::npos);
    CHECK(message.empty());
    auto config = load_text(text);
    resolve_config(config, 16);
    CHECK(describe_layout(config) == describe_layout(newest));
    CHECK(dump_config_yaml(config) == expected);
    CHECK(config.model.architecture.num_hidden_layers == 48);
    CHECK(config.dataset.mock_length_distribution == "fixed(length=4096)");
  }
}

TEST_CASE("fields of older Bridge releases are honoured, inert or refused by their rule",
          "[config][bridge]") {
  const auto old = release_dump("0.4.2");
  REQUIRE(old.find("\n  muon_use_nesterov: false\n") != std::string::npos);
  REQUIRE(old.find("\n  muon_nesterov:") == std::string::npos);

  // Inert: Muon's options (Muon itself is refused) and TikToken's (a tokenizer not built).
  const auto base = load_text(old);
  CHECK_FALSE(lists(base, "optimizer.muon_use_nesterov=true"));
  const auto muon = load_text(edit(old, "optimizer", "muon_use_nesterov", "false", "true"));
  CHECK(lists(muon, "optimizer.muon_use_nesterov=true"));
  const auto tiktoken =
      load_text(edit(old, "tokenizer", "tiktoken_special_tokens", "null", "[<unk>, <s>, </s>]"));
  CHECK(lists(tiktoken, "tokenizer.tiktoken_special_tokens=[<unk>, <s>, </s>]"));
  // Either release's default of a field whose default changed gives no warning.
  CHECK_FALSE(lists(base, "model.cuda_graph_use_single_mempool=false"));
  CHECK(old.find("\n  cuda_graph_use_single_mempool: false\n") != std::string::npos);

  // Honoured: 0.4's dataset.sequence_length is the dataset's sequence length.
  const auto shorter = load_text(edit(old, "dataset", "sequence_length", "4096", "2048"));
  CHECK(shorter.dataset.seq_length == 2048);
  CHECK(shorter.dataset.mock_length_distribution == "fixed(length=2048)");
  const auto newest = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  auto both = edit(newest, "dataset", "seq_length", "4096", "4096\n  sequence_length: 2048");
  auto message = error_of(both);
  CHECK(message.find("dataset.sequence_length") != std::string::npos);
  CHECK(message.find("contradicts dataset.seq_length (4096)") != std::string::npos);

  // Refused: 0.4's offline packing of FinetuningDatasetConfig.
  message = error_of(edit(old, "dataset", "split", "9999,8,2",
                          "9999,8,2\n  packed_sequence_specs:\n    _target_: "
                          "megatron.bridge.data.packing.config.PackedSequenceSpecs\n"
                          "    packed_sequence_size: 4096"));
  CHECK(message.find("dataset.packed_sequence_specs") != std::string::npos);
  CHECK(message.find("offline packing") != std::string::npos);
  CHECK(message.find("unknown key") == std::string::npos);

  // A newer release's name in an older dump is a field all the same (dumps carry no version).
  const auto renamed = load_text(
      edit(old, "optimizer", "muon_use_nesterov", "false", "false\n  muon_nesterov: true"));
  CHECK(lists(renamed, "optimizer.muon_nesterov=true"));
}

TEST_CASE("a key no Bridge release has is still an unknown key", "[config][bridge]") {
  for (const auto& label : older_releases()) {
    INFO(label);
    const auto text = release_dump(label);
    const auto message =
        error_of(edit(text, "optimizer", "lr", "0.0003", "0.0003\n  muon_use_nesterovv: true"));
    CHECK(message.find("optimizer.muon_use_nesterovv") != std::string::npos);
    CHECK(message.find("unknown key (a field of no Megatron-Bridge release known here") !=
          std::string::npos);
    CHECK(message.find("0.4.2") != std::string::npos);
    CHECK(message.find("did you mean optimizer.muon_use_nesterov?") != std::string::npos);
  }
}

TEST_CASE("the Bridge-format print holds the fields of the newest release only",
          "[config][bridge]") {
  auto config = load_text(release_dump("0.4.2"));
  resolve_config(config, 16);
  const auto bridge = dump_bridge_yaml(config);
  CHECK(bridge.find("\n  muon_nesterov: false\n") != std::string::npos);
  CHECK(bridge.find("muon_use_nesterov") == std::string::npos);
  CHECK(bridge.find("tiktoken_special_tokens") == std::string::npos);
  CHECK(bridge.find("\n  seq_length: 4096\n") != std::string::npos);
  CHECK(bridge.find("\n  sequence_length:") == std::string::npos);
}

TEST_CASE("SFT dataset arguments that change samples or the loss are refused", "[config][bridge]") {
  const auto text = read_text(fixture_path("qwen3_30b_a3b_sft_dynamic_cp.yaml"));
  const std::string padding = "  dataset_kwargs:\n    pad_to_max_length: true\n";
  REQUIRE(text.find(padding) != std::string::npos);
  // Padding has no effect with global-batch packing: listed with the inert settings.
  CHECK(lists(load_text(text), "dataset.dataset_kwargs.pad_to_max_length=true"));
  for (const auto& [argument, value] : std::vector<std::pair<std::string, std::string>>{
           {"min_seq_length", "64"}, {"seed", "7"}, {"answer_only_loss", "false"}}) {
    INFO(argument);
    auto edited = text;
    edited.replace(edited.find(padding), padding.size(),
                   padding + "    " + argument + ": " + value + "\n");
    const auto message = error_of(edited);
    CHECK(message.find("dataset.dataset_kwargs." + argument) != std::string::npos);
    CHECK(message.find("changes the samples or the loss and is not built") != std::string::npos);
  }
}

TEST_CASE("train's deprecated validation fields override validation's as in Bridge",
          "[config][bridge]") {
  const auto text = read_text(fixture_path("qwen3_30b_a3b_pretrain_dynamic_cp.yaml"));
  const auto base = load_text(text);
  CHECK(base.validation.eval_iters == 32);
  CHECK(base.validation.eval_interval == 500);
  auto edited = edit(text, "train", "eval_iters", "null", "5");
  edited = edit(edited, "train", "eval_interval", "null", "20");
  const auto config = load_text(edited);
  CHECK(config.validation.eval_iters == 5);
  CHECK(config.validation.eval_interval == 20);
  CHECK_FALSE(lists(config, "train.eval_iters=5"));
}

TEST_CASE("masking the loss on end-of-document tokens is refused", "[config][bridge]") {
  for (const auto& label : older_releases()) {
    INFO(label);
    const auto text = release_dump(label);
    CHECK(error_of(text).empty());
    const auto message = error_of(edit(text, "dataset", "eod_mask_loss", "false", "true"));
    CHECK(message.find("dataset.eod_mask_loss") != std::string::npos);
    CHECK(message.find("masking the loss on end-of-document tokens (the loss counts") !=
          std::string::npos);
  }
}
