// Pipeline stages of the model (ModelPart, forward_chunk / backward_chunk): a stage holds only
// its layers, seeded and loaded with the whole model's values there, and stages passing
// activations and gradients between them, several microbatches in flight, give bitwise the
// loss and gradients of run_bin over the same bins.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <memory>

#include "core/alloc_counter.hpp"
#include "model/microbatch_state.hpp"
#include "model/whole_model_tensors.hpp"
#include "model_test_support.hpp"

namespace dyncp::model {
namespace {

config::ModelArchitecture fixture_architecture(const std::string& name) {
  auto architecture = config::load_hf_model_config(testing::fixture_dir(name));
  architecture.resolve();
  return architecture;
}

// The values (or gradients) of every tensor, by HF name, in HF order.
std::map<std::string, std::vector<float>> by_name(const Qwen3MoeParameters& parameters,
                                                  bool gradients) {
  std::map<std::string, std::vector<float>> tensors;
  for (const HfTensor& tensor : parameters.hf_tensors()) {
    std::vector<float> values(static_cast<std::size_t>(tensor.value.numel()));
    tensor.read_hf_order(gradients ? tensor.grad : tensor.value, values.data());
    tensors[tensor.name] = std::move(values);
  }
  return tensors;
}

ModelPart part_of(std::vector<ModelPart::LayerRun> layers, bool embedding, bool head) {
  ModelPart part;
  part.layers = std::move(layers);
  part.embedding = embedding;
  part.head = head;
  return part;
}

}  // namespace

TEST_CASE("a stage's part holds only its layers, seeded with the whole model's values",
          "[model][pipeline]") {
  const std::string fixture =
      GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b", "qwen3_moe_b_tied_unnormalized");
  INFO("fixture " << fixture);
  const config::ModelArchitecture architecture = fixture_architecture(fixture);
  const std::int64_t layers = architecture.num_hidden_layers;
  Qwen3MoeParameters whole(architecture);
  whole.init_random(11);
  const auto whole_values = by_name(whole, false);
  // The first stage, a middle one, the last one, and a stage of two virtual chunks.
  const std::vector<ModelPart> parts = {
      part_of({{0, 1}}, true, false), part_of({{1, layers - 2}}, false, false),
      part_of({{layers - 1, 1}}, false, true), part_of({{0, 1}, {layers - 1, 1}}, true, true)};
  for (const ModelPart& part : parts) {
    Qwen3MoeParameters stage(architecture, {}, core::DType::f32, core::Device::cpu, {}, part);
    stage.init_random(11);
    std::int64_t held_layers = 0;
    for (const auto& run : part.layers) held_layers += run.count;
    CHECK(static_cast<std::int64_t>(stage.layers.size()) == held_layers);
    CHECK(stage.num_parameters() <= whole.num_parameters());
    for (std::size_t i = 0; i < stage.layers.size(); ++i)
      CHECK(stage.position_of_layer(stage.layer_id(i)) == static_cast<std::int64_t>(i));
    std::int64_t embedding_tensors = 0;
    for (const auto& [name, values] : by_name(stage, false)) {
      INFO(name);
      REQUIRE(whole_values.count(name) == 1);
      CHECK(values == whole_values.at(name));
      embedding_tensors += name == "model.embed_tokens.weight";
      if (name.starts_with("model.layers.")) {
        const std::int64_t layer = std::stoll(name.substr(13));
        CHECK(stage.position_of_layer(layer) >= 0);
      }
    }
    // The embedding on the first stage; a tied head's copy of it on the last.
    const bool tied = architecture.tie_word_embeddings;
    CHECK(embedding_tensors == ((part.embedding || (part.head && tied)) ? 1 : 0));
    CHECK(stage.holds_tied_head_copy() == (part.head && !part.embedding && tied));
    CHECK((stage.find("model.norm.weight") != nullptr) == part.head);
  }
  REQUIRE_THROWS_WITH(Qwen3MoeParameters(architecture, {}, core::DType::f32, core::Device::cpu, {},
                                         part_of({{1, 1}, {0, 1}}, true, true)),
                      Catch::Contains("ascending"));
}

TEST_CASE("the whole model's tensor list is the same from every stage, held where it is held",
          "[model][pipeline]") {
  const std::string fixture = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b",
                                       "qwen3_moe_b_tied_unnormalized", "qwen3_next");
  INFO("fixture " << fixture);
  config::ModelArchitecture architecture =
      fixture_architecture(fixture == "qwen3_next" ? "qwen3_5_moe_b" : fixture);
  if (fixture == "qwen3_next") {
    architecture.model_type = "qwen3_next";  // the fused in_proj_qkvz / in_proj_ba names
    architecture.resolve();
  }
  const Qwen3MoeParameters whole(architecture);
  const std::vector<WholeModelTensor> listed = whole_model_tensors(whole);
  // The whole model lists exactly its own tensors, in its order, with their shapes.
  REQUIRE(listed.size() == whole.hf_tensors().size());
  for (std::size_t i = 0; i < listed.size(); ++i) {
    const HfTensor& own = whole.hf_tensors()[i];
    INFO(own.name);
    CHECK(listed[i].name == own.name);
    std::vector<std::int64_t> shape;
    for (int d = 0; d < own.value.rank(); ++d) shape.push_back(own.value.size(d));
    CHECK(listed[i].shape == shape);
    CHECK((listed[i].layer >= 0) == own.is_expert);
    if (!own.is_expert) {
      CHECK(listed[i].held == &own);
      CHECK(listed[i].reordered == !own.stored_in_hf_order());
    }
  }
  // A stage lists the same tensors and holds its own.
  const std::int64_t layers = architecture.num_hidden_layers;
  const Qwen3MoeParameters stage(architecture, {0, architecture.num_experts / 2}, core::DType::f32,
                                 core::Device::cpu, {}, part_of({{layers - 1, 1}}, false, true));
  const std::vector<WholeModelTensor> from_stage = whole_model_tensors(stage);
  REQUIRE(from_stage.size() == listed.size());
  std::size_t held = 0;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    INFO(listed[i].name);
    CHECK(from_stage[i].name == listed[i].name);
    CHECK(from_stage[i].shape == listed[i].shape);
    const bool in_stage = listed[i].layer >= 0 ? listed[i].layer == layers - 1 &&
                                                     listed[i].expert < architecture.num_experts / 2
                                               : stage.find(listed[i].name) != nullptr;
    CHECK(holds(stage, from_stage[i]) == in_stage);
    held += in_stage ? 1 : 0;
  }
  CHECK(held == stage.hf_tensors().size());
}

TEST_CASE("stages passing activations and gradients give run_bin's loss and gradients",
          "[model][pipeline]") {
  const std::string fixture = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b");
  const bool recompute = GENERATE(false, true);
  INFO("fixture " << fixture << " recompute " << recompute);
  const std::string folder = testing::fixture_dir(fixture);
  const config::ModelArchitecture architecture = fixture_architecture(fixture);
  const std::int64_t layers = architecture.num_hidden_layers;
  ModelOptions options;
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
  options.recompute_full = recompute;
  const auto whole = load_hf_model(folder, options);

  // Two microbatches: the batch's sequences split in two bins.
  const TokenSequences sequences = read_batch_json(folder + "/batch.json");
  const TokenSequences first(sequences.begin(), sequences.begin() + 2);
  const TokenSequences second(sequences.begin() + 2, sequences.end());
  const OwnedPackedBin bins[2] = {pack_sequences(first), pack_sequences(second)};
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  BinOptions bin_options;
  bin_options.loss_grad_scale = 1.0 / static_cast<double>(loss_tokens);
  bin_options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());
  LocalSeams seams;
  whole->parameters().zero_grads();
  double whole_loss = 0.0, whole_aux = 0.0;
  for (const auto& bin : bins) {
    const BinResult result = whole->run_bin(bin.bin, seams.seams(), bin_options);
    whole_loss += result.loss_sum;
    whole_aux += result.aux_loss;
  }

  // Two stages over two virtual chunks each (layers [0,1) | [1,2) | [2,3) | [3,L)), as
  // interleaving lays them out: stage 0 holds chunks 0 and 2, stage 1 chunks 1 and 3.
  const ChunkPass chunks[4] = {{0, 1, true, false},
                               {1, 1, false, false},
                               {2, 1, false, false},
                               {3, layers - 3, false, true}};
  std::unique_ptr<Qwen3MoeModel> stages[2];
  for (int s = 0; s < 2; ++s) {
    ModelOptions stage_options = options;
    stage_options.part = part_of({{chunks[s].first_layer, chunks[s].num_layers},
                                  {chunks[s + 2].first_layer, chunks[s + 2].num_layers}},
                                 s == 0, s == 1);
    stages[s] = load_hf_model(folder, stage_options);
    stages[s]->parameters().zero_grads();
  }
  const std::int64_t hidden = architecture.hidden_size;
  // Activations between virtual stages k and k + 1, and their gradients, per microbatch.
  std::vector<core::Tensor> activation[2], gradient[2];
  for (int m = 0; m < 2; ++m) {
    const std::int64_t rows = bins[m].bin.token_ids.numel();
    for (int k = 0; k < 3; ++k) {
      activation[m].push_back(core::Tensor::zeros({rows, hidden}, core::DType::f32));
      gradient[m].push_back(core::Tensor::zeros({rows, hidden}, core::DType::f32));
    }
  }
  const auto stage_of = [](int k) { return k % 2; };
  // State (m, k) of stage k % 2: every chunk of both microbatches in flight at once.
  const auto state = [&](int m, int k) -> MicrobatchState& {
    return stages[stage_of(k)]->microbatch_state(static_cast<std::size_t>(2 * m + k / 2));
  };
  // Seams keep per-bin state from a forward to its backward: one set per pass in flight.
  LocalSeams pass_seams[2][4];
  double loss = 0.0, aux = 0.0;
  const auto forward = [&](int m, int k) {
    const BinResult result = stages[stage_of(k)]->forward_chunk(
        state(m, k), bins[m].bin, pass_seams[m][k].seams(), bin_options, chunks[k],
        k > 0 ? activation[m][static_cast<std::size_t>(k - 1)] : core::Tensor{},
        k < 3 ? activation[m][static_cast<std::size_t>(k)] : core::Tensor{});
    loss += result.loss_sum;
    aux += result.aux_loss;
  };
  const auto backward = [&](int m, int k) {
    stages[stage_of(k)]->backward_chunk(
        state(m, k), k < 3 ? gradient[m][static_cast<std::size_t>(k)] : core::Tensor{},
        k > 0 ? gradient[m][static_cast<std::size_t>(k - 1)] : core::Tensor{});
  };
  // Both microbatches' forwards through every chunk, then the backwards in microbatch order,
  // as an interleaved schedule's warm-up and cool-down do.
  for (int m = 0; m < 2; ++m)
    for (int k = 0; k < 4; ++k) forward(m, k);
  for (int m = 0; m < 2; ++m)
    for (int k = 3; k >= 0; --k) backward(m, k);

  CHECK(loss == whole_loss);
  CHECK(aux == Approx(whole_aux).epsilon(1e-12));
  const auto expected = by_name(whole->parameters(), true);
  std::size_t compared = 0;
  for (const auto& stage : stages) {
    for (const auto& [name, values] : by_name(stage->parameters(), true)) {
      INFO(name);
      CHECK(values == expected.at(name));
      ++compared;
    }
  }
  CHECK(compared == expected.size());
  // Steady state: the same passes again allocate no heap memory (every state's arenas and the
  // transfer buffers are in place).
  {
    core::AllocationCounter counter;
    for (int m = 0; m < 2; ++m)
      for (int k = 0; k < 4; ++k) forward(m, k);
    for (int m = 0; m < 2; ++m)
      for (int k = 3; k >= 0; --k) backward(m, k);
    CHECK(counter.count() == 0);
  }
  REQUIRE_THROWS_WITH(stages[0]->backward_chunk(state(0, 0), {}, {}),
                      Catch::Contains("no forward awaiting"));
  REQUIRE_THROWS_WITH(stages[0]->run_bin(bins[0].bin, seams.seams(), bin_options),
                      Catch::Contains("whole model"));
}

TEST_CASE("a tied head's copy on the last stage takes the head's share of the gradient",
          "[model][pipeline]") {
  const std::string folder = testing::fixture_dir("qwen3_moe_b_tied_unnormalized");
  const config::ModelArchitecture architecture =
      fixture_architecture("qwen3_moe_b_tied_unnormalized");
  const auto whole = load_hf_model(folder);
  const TokenSequences sequences = read_batch_json(folder + "/batch.json");
  const OwnedPackedBin bin = pack_sequences(sequences);
  BinOptions bin_options;
  bin_options.loss_grad_scale = 1e-2;
  LocalSeams seams;
  whole->parameters().zero_grads();
  const double whole_loss = whole->run_bin(bin.bin, seams.seams(), bin_options).loss_sum;

  ModelOptions first_options, last_options;
  first_options.part = part_of({{0, 1}}, true, false);
  last_options.part = part_of({{1, architecture.num_hidden_layers - 1}}, false, true);
  const auto first = load_hf_model(folder, first_options);
  const auto last = load_hf_model(folder, last_options);
  REQUIRE(last->parameters().holds_tied_head_copy());
  first->parameters().zero_grads();
  last->parameters().zero_grads();
  const std::int64_t rows = bin.bin.token_ids.numel();
  const core::Tensor hidden =
      core::Tensor::zeros({rows, architecture.hidden_size}, core::DType::f32);
  const core::Tensor grad = core::Tensor::zeros({rows, architecture.hidden_size}, core::DType::f32);
  const ChunkPass head_chunk{1, architecture.num_hidden_layers - 1, false, true};
  first->forward_chunk(first->microbatch_state(0), bin.bin, seams.seams(), bin_options,
                       {0, 1, true, false}, {}, hidden);
  const double loss = last->forward_chunk(last->microbatch_state(0), bin.bin, seams.seams(),
                                          bin_options, head_chunk, hidden, {})
                          .loss_sum;
  last->backward_chunk(last->microbatch_state(0), {}, grad);
  first->backward_chunk(first->microbatch_state(0), grad, {});
  CHECK(loss == whole_loss);
  // The whole model's embedding gradient is the embedding's plus the head's: what the
  // embedding group's sum gives both copies.
  const HfTensor& whole_embedding = *whole->parameters().find("model.embed_tokens.weight");
  const float* a = first->parameters().find("model.embed_tokens.weight")->grad.data<float>();
  const float* b = last->parameters().find("model.embed_tokens.weight")->grad.data<float>();
  const float* expected = whole_embedding.grad.data<float>();
  double diff = 0.0, norm = 0.0, head_share = 0.0;
  for (std::int64_t i = 0; i < whole_embedding.grad.numel(); ++i) {
    const double sum = static_cast<double>(a[i]) + b[i];
    diff += (sum - expected[i]) * (sum - expected[i]);
    norm += static_cast<double>(expected[i]) * expected[i];
    head_share += static_cast<double>(b[i]) * b[i];
  }
  CHECK(std::sqrt(diff) <= 1e-6 * std::sqrt(norm));
  CHECK(head_share > 0.0);
}

}  // namespace dyncp::model
