// The hybrid model (Qwen3-Next / Qwen3.5-MoE) beyond the HF golden test: both checkpoint
// layouts of the same weights, export, padding inside packed sequences, initialisation.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model_test_support.hpp"

namespace dyncp::model {
namespace {

namespace fs = std::filesystem;

const std::string hybrid_fixture = "qwen3_5_moe_b";

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_dir("hybrid_" + name);
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<float> hf_order_values(const HfTensor& tensor) {
  std::vector<float> values(static_cast<std::size_t>(tensor.value.numel()));
  tensor.read_hf_order(tensor.value, values.data());
  return values;
}

TEST_CASE("the Qwen3-Next and Qwen3.5 layouts of the same weights give identical logits",
          "[model][hybrid][checkpoint]") {
  const auto fixture = testing::fixture_dir(hybrid_fixture);
  const auto qwen3_5 = load_hf_model(fixture);
  CHECK(qwen3_5->architecture().model_type == "qwen3_5_moe_text");
  const auto sequences = read_batch_json(fixture + "/batch.json");
  const auto reference = testing::run_batch(*qwen3_5, sequences);

  // The same weights as a Qwen3-Next model: our grouped in_proj_qkvz / in_proj_ba views must
  // hold exactly what the generator wrote for that layout (HF's Qwen3NextForCausalLM gave the
  // Qwen3.5 loss on it).
  auto architecture = qwen3_5->architecture();
  architecture.model_type = "qwen3_next";
  Qwen3MoeModel next(architecture);
  next.parameters().all_values().copy_from(qwen3_5->parameters().all_values());
  const SafetensorsFile projections(fixture + "/qwen3_next_projections.safetensors");
  int checked = 0;
  for (const auto& tensor : projections.header().tensors) {
    INFO(tensor.name);
    const HfTensor* ours = next.parameters().find(tensor.name);
    REQUIRE(ours != nullptr);
    std::vector<float> stored(static_cast<std::size_t>(tensor.num_elements()));
    projections.read_f32(tensor.name, stored);
    CHECK(hf_order_values(*ours) == stored);
    ++checked;
  }
  CHECK(checked == 4);  // two DeltaNet layers × (in_proj_qkvz, in_proj_ba)

  // Export in the Qwen3-Next layout and load it back: per-expert tensors, no prefix.
  const auto dir = fresh_dir("next_layout");
  save_hf_checkpoint(dir.string(), next.parameters(), StoredDType::f32);
  const SafetensorsCheckpoint written(dir.string());
  CHECK(written.find("model.layers.0.linear_attn.in_proj_qkvz.weight") != nullptr);
  CHECK(written.find("model.layers.0.linear_attn.in_proj_qkv.weight") == nullptr);
  CHECK(written.find("model.layers.1.mlp.experts.7.down_proj.weight") != nullptr);
  const auto reloaded = load_hf_model(dir.string());
  CHECK(reloaded->architecture().model_type == "qwen3_next");
  const auto again = testing::run_batch(*reloaded, sequences);
  CHECK(again.result.loss_sum == reference.result.loss_sum);
  CHECK(again.final_hidden == reference.final_hidden);
  CHECK(again.grads == reference.grads);
  fs::remove_all(dir);
}

TEST_CASE("a Qwen3.5 export has fused experts, the config transformers reads, and round trips",
          "[model][hybrid][checkpoint]") {
  const auto fixture = testing::fixture_dir(hybrid_fixture);
  const auto model = load_hf_model(fixture);
  const auto sequences = read_batch_json(fixture + "/batch.json");
  const auto reference = testing::run_batch(*model, sequences);
  const auto dir = fresh_dir("qwen3_5_export");
  save_hf_checkpoint(dir.string(), model->parameters(), StoredDType::f32);

  // What Qwen3_5MoeForCausalLM's own state dict holds: text names under `model.`, fused experts.
  const SafetensorsCheckpoint written(dir.string());
  const auto* gate_up = written.find("model.layers.2.mlp.experts.gate_up_proj");
  REQUIRE(gate_up != nullptr);
  CHECK(gate_up->shape == std::vector<std::int64_t>{8, 48, 64});
  const auto* down = written.find("model.layers.2.mlp.experts.down_proj");
  REQUIRE(down != nullptr);
  CHECK(down->shape == std::vector<std::int64_t>{8, 64, 24});
  CHECK(written.find("model.layers.2.mlp.experts.0.gate_proj.weight") == nullptr);
  CHECK(written.find("model.layers.1.self_attn.q_proj.weight")->shape ==
        std::vector<std::int64_t>{192, 64});
  CHECK(written.find("model.layers.0.linear_attn.in_proj_qkv.weight")->shape ==
        std::vector<std::int64_t>{160, 64});

  const auto config = read_json(dir / "config.json");
  CHECK(config["model_type"] == "qwen3_5_moe_text");
  CHECK(config["architectures"][0] == "Qwen3_5MoeForCausalLM");
  CHECK(config["rope_parameters"]["partial_rotary_factor"] == 0.25);
  CHECK(config["shared_expert_intermediate_size"] == 40);
  CHECK(config["layer_types"][1] == "full_attention");
  CHECK_FALSE(config.contains("norm_topk_prob"));  // not a Qwen3.5 field

  const auto reloaded = load_hf_model(dir.string());
  const auto again = testing::run_batch(*reloaded, sequences);
  CHECK(again.result.loss_sum == reference.result.loss_sum);
  CHECK(again.grads == reference.grads);
  fs::remove_all(dir);
}

// Packs sequences with `pads[s]` alignment-padding tokens after the last real token of
// sequence s, inside its cu_seqlens span (fold_alignment_padding): no label, not real.
OwnedPackedBin pack_with_padding(const TokenSequences& sequences,
                                 const std::vector<std::int32_t>& pads) {
  TokenSequences padded = sequences;
  for (std::size_t s = 0; s < padded.size(); ++s)
    padded[s].insert(padded[s].end(), static_cast<std::size_t>(pads[s]), 0);
  OwnedPackedBin packed = pack_sequences(padded);
  packed.bin.token_is_real = core::Tensor::zeros({packed.bin.token_ids.numel()}, core::DType::u8);
  auto* real = packed.bin.token_is_real.data<std::uint8_t>();
  auto* labels = packed.bin.labels.data<std::int32_t>();
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    const auto begin = packed.sequence_offsets[s];
    const auto real_end = begin + static_cast<std::int64_t>(sequences[s].size());
    for (auto row = begin; row < packed.sequence_offsets[s + 1]; ++row) {
      real[row] = row < real_end ? 1 : 0;
      if (row >= real_end - 1) labels[row] = -1;  // the last real token has no next token
    }
  }
  return packed;
}

TEST_CASE("padding after the last real token changes no real token's output", "[model][hybrid]") {
  // Causality of the conv window, the recurrence and attention: pads only ever see real
  // tokens, never the reverse. With the aux loss on, its statistics skip the pads too.
  const auto fixture = testing::fixture_dir(hybrid_fixture);
  ModelOptions options;
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
  const auto model = load_hf_model(fixture, options);
  const auto sequences = read_batch_json(fixture + "/batch.json");

  const auto run = [&](const OwnedPackedBin& packed, std::vector<float>& per_token,
                       std::vector<float>& grads) {
    const std::int64_t tokens = packed.bin.token_ids.numel();
    per_token.assign(static_cast<std::size_t>(tokens), 0.0f);
    BinOptions bin_options;
    bin_options.per_token_loss =
        core::Tensor::view_of(per_token.data(), {tokens}, core::DType::f32);
    bin_options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());
    LocalSeams seams;
    model->parameters().zero_grads();
    const auto result = model->run_bin(packed.bin, seams.seams(), bin_options);
    const auto& all = model->parameters().all_grads();
    grads.assign(all.data<float>(), all.data<float>() + all.numel());
    return result;
  };
  std::vector<float> plain_loss, plain_grads, padded_loss, padded_grads;
  const auto unpadded =
      pack_with_padding(sequences, std::vector<std::int32_t>(sequences.size(), 0));
  // Pads of 3, 0, 6, 1, 5 tokens: the 70-token sequence's pad crosses a 64-token chunk edge.
  const auto padded = pack_with_padding(sequences, {3, 0, 6, 1, 5});
  const auto plain = run(unpadded, plain_loss, plain_grads);
  const auto with_pads = run(padded, padded_loss, padded_grads);

  CHECK(with_pads.loss_tokens == plain.loss_tokens);
  CHECK(with_pads.loss_sum == Approx(plain.loss_sum).epsilon(1e-6));
  CHECK(with_pads.aux_loss == Approx(plain.aux_loss).epsilon(1e-6));
  CHECK(plain.aux_loss > 0.0);
  for (std::size_t s = 0; s < sequences.size(); ++s)
    for (std::size_t j = 0; j < sequences[s].size(); ++j) {
      INFO("sequence " << s << " token " << j);
      CHECK(padded_loss[static_cast<std::size_t>(padded.sequence_offsets[s]) + j] ==
            Approx(plain_loss[static_cast<std::size_t>(unpadded.sequence_offsets[s]) + j])
                .epsilon(1e-5));
    }
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < plain_grads.size(); ++i) {
    diff += (double(padded_grads[i]) - plain_grads[i]) * (double(padded_grads[i]) - plain_grads[i]);
    norm += double(plain_grads[i]) * plain_grads[i];
  }
  CHECK(std::sqrt(diff) <= 1e-5 * std::sqrt(norm));
}

TEST_CASE("model gradients match finite differences in f64", "[model][hybrid]") {
  // The whole model in double precision on a fixture's weights (for the hybrid: gated
  // attention, DeltaNet over two chunks, shared experts, every norm variant): every tensor's
  // analytic gradient at its largest entry and at one more entry against a central difference
  // of the summed loss.
  const std::string name = GENERATE(as<std::string>{}, "qwen3_moe_a", hybrid_fixture);
  INFO(name);
  const auto fixture = testing::fixture_dir(name);
  ModelOptions options;
  options.dtype = core::DType::f64;
  const auto model = load_hf_model(fixture, options);
  const auto packed = pack_sequences(read_batch_json(fixture + "/batch.json"));
  LocalSeams seams;
  const auto loss_sum = [&](bool gradients) {
    BinOptions bin_options;
    bin_options.compute_gradients = gradients;
    return model->run_bin(packed.bin, seams.seams(), bin_options).loss_sum;
  };
  model->parameters().zero_grads();
  loss_sum(true);

  // Central differences of the summed loss (~670): at this step the truncation error stays
  // below 1e-6 relative and the round-off below 1e-7 absolute (steps of 1e-4 and 1e-6 show
  // each one growing); a wrong formula is off by the size of the gradient itself.
  constexpr double step = 1e-5;
  int checked = 0;
  for (const auto& tensor : model->parameters().hf_tensors()) {
    double* values = tensor.value.data<double>();
    const double* grads = tensor.grad.data<double>();
    std::int64_t largest = 0;
    for (std::int64_t i = 0; i < tensor.grad.numel(); ++i)
      if (std::abs(grads[i]) > std::abs(grads[largest])) largest = i;
    for (const std::int64_t i : {largest, tensor.grad.numel() / 3}) {
      const double saved = values[i];
      values[i] = saved + step;
      const double up = loss_sum(false);
      values[i] = saved - step;
      const double down = loss_sum(false);
      values[i] = saved;
      const double numeric = (up - down) / (2.0 * step);
      INFO(tensor.name << "[" << i << "]: analytic " << grads[i] << ", numeric " << numeric);
      CHECK(std::abs(grads[i] - numeric) <= 1e-6 * std::abs(numeric) + 1e-7);
      ++checked;
    }
  }
  CHECK(checked == 2 * static_cast<int>(model->parameters().hf_tensors().size()));
}

TEST_CASE("hybrid initialisation puts every norm at its identity", "[model][hybrid]") {
  auto architecture = load_hf_model(testing::fixture_dir(hybrid_fixture))->architecture();
  const Qwen3MoeParameters parameters(architecture);
  parameters.init_random(7);
  const auto all_equal = [](const HfTensor* tensor, float value) {
    REQUIRE(tensor != nullptr);
    const float* data = tensor->value.data<float>();
    for (std::int64_t i = 0; i < tensor->value.numel(); ++i)
      if (data[i] != value) return false;
    return true;
  };
  // Zero-centred (1 + w) norms are the identity at 0, the DeltaNet's gated norm at 1.
  CHECK(all_equal(parameters.find("model.layers.0.input_layernorm.weight"), 0.0f));
  CHECK(all_equal(parameters.find("model.layers.1.self_attn.q_norm.weight"), 0.0f));
  CHECK(all_equal(parameters.find("model.norm.weight"), 0.0f));
  CHECK(all_equal(parameters.find("model.layers.0.linear_attn.norm.weight"), 1.0f));
  CHECK(all_equal(parameters.find("model.layers.2.linear_attn.dt_bias"), 1.0f));
  const HfTensor* a_log = parameters.find("model.layers.0.linear_attn.A_log");
  REQUIRE(a_log != nullptr);
  for (std::int64_t i = 0; i < a_log->value.numel(); ++i) {
    CHECK(a_log->value.data<float>()[i] >= 0.0f);
    CHECK(a_log->value.data<float>()[i] <= std::log(16.0f));
  }
}

}  // namespace
}  // namespace dyncp::model

namespace dyncp::model {

TEST_CASE("whole_model_row_runs is the row order of the whole model's storage of every tensor",
          "[model][hybrid][checkpoint]") {
  // The HF row of each local row, from runs (empty: the identity over `rows`).
  const auto hf_rows = [](const std::vector<HfRowRun>& runs, std::int64_t rows) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) order[static_cast<std::size_t>(r)] = r;
    for (const HfRowRun& run : runs)
      for (std::int64_t r = 0; r < run.count; ++r)
        order[static_cast<std::size_t>(run.row + r)] = run.hf_row + r;
    return order;
  };
  const std::string name = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b");
  const std::string type = GENERATE(as<std::string>{}, "", "qwen3_next");
  auto architecture = load_hf_model(testing::fixture_dir(name))->architecture();
  if (!type.empty() && architecture.is_hybrid()) architecture.model_type = type;
  INFO(name << " as " << architecture.model_type);
  const Qwen3MoeParameters whole(architecture);
  int reordered = 0;
  for (const HfTensor& tensor : whole.hf_tensors()) {
    INFO(tensor.name);
    const std::int64_t rows = tensor.value.size(0);
    const auto expected = hf_rows(tensor.row_runs, rows);
    CHECK(hf_rows(whole_model_row_runs(architecture, tensor.name), rows) == expected);
    bool identity = true;
    for (std::int64_t r = 0; r < rows; ++r) identity = identity && expected[r] == r;
    reordered += identity ? 0 : 1;
  }
  // Qwen3-MoE keeps HF order; the hybrid reorders its gated q_proj, Qwen3-Next also its fused
  // DeltaNet projections.
  CHECK((reordered == 0) == !architecture.is_hybrid());
}

}  // namespace dyncp::model
