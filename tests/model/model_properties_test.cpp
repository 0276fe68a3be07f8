// Properties of the packed-bin model that need no reference implementation: packing,
// recompute, gradient accumulation, allocation-free steady state, seeded init.
#include <catch2/catch.hpp>

#include "core/alloc_counter.hpp"
#include "model_test_support.hpp"

namespace dyncp::model {
namespace {

// The Qwen3-MoE fixture; the tests that hold for every model family also run the hybrid one.
const std::string fixture = "qwen3_moe_a";

double max_relative_gap(const std::vector<float>& ours, const std::vector<float>& reference) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    diff += (double(ours[i]) - reference[i]) * (double(ours[i]) - reference[i]);
    norm += double(reference[i]) * reference[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

TEST_CASE("one packed bin equals the sequences run one by one", "[model]") {
  const std::string fixture = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b");
  INFO("fixture " << fixture);
  const auto model = load_hf_model(testing::fixture_dir(fixture));
  const auto sequences = read_batch_json(testing::fixture_dir(fixture) + "/batch.json");
  const auto packed = testing::run_batch(*model, sequences);

  // Separately: each sequence is its own bin; per-sequence gradients scaled to the same
  // token-mean loss and summed.
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  std::vector<double> summed(packed.grads.size(), 0.0);
  double loss_sum = 0.0;
  std::size_t row = 0;
  for (const auto& sequence : sequences) {
    const auto single = testing::run_batch(*model, {sequence});
    loss_sum += single.result.loss_sum;
    const double weight =
        static_cast<double>(sequence.size() - 1) / static_cast<double>(loss_tokens);
    for (std::size_t i = 0; i < summed.size(); ++i) summed[i] += weight * single.grads[i];
    for (std::size_t j = 0; j < sequence.size(); ++j, ++row)
      CHECK(single.per_token_loss[j] == Approx(packed.per_token_loss[row]).epsilon(1e-5));
  }
  CHECK(loss_sum == Approx(packed.result.loss_sum).epsilon(1e-6));
  const std::vector<float> separate(summed.begin(), summed.end());
  CHECK(max_relative_gap(packed.grads, separate) <= 1e-5);
}

TEST_CASE("recompute_granularity=full gives bitwise the same loss and gradients", "[model]") {
  const std::string fixture = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b");
  INFO("fixture " << fixture);
  const auto model = load_hf_model(testing::fixture_dir(fixture));
  const auto sequences = read_batch_json(testing::fixture_dir(fixture) + "/batch.json");
  const auto stored = testing::run_batch(*model, sequences);
  // Every layer (uniform), then only the first layer or the first two (block): recomputed and
  // kept layers side by side in one bin.
  for (const std::int64_t first_layers : {-1, 1, 2}) {
    INFO("recompute_first_layers " << first_layers);
    model->set_recompute_full(true, first_layers);
    const auto recomputed = testing::run_batch(*model, sequences);
    CHECK(recomputed.result.loss_sum == stored.result.loss_sum);
    CHECK(recomputed.grads == stored.grads);
  }
}

TEST_CASE("selective recomputation gives bitwise the same loss and gradients", "[model]") {
  const std::string fixture = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b");
  INFO("fixture " << fixture);
  ModelOptions options;
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;  // the router's backward reads the norm
  const auto model = load_hf_model(testing::fixture_dir(fixture), options);
  const auto sequences = read_batch_json(testing::fixture_dir(fixture) + "/batch.json");
  const auto stored = testing::run_batch(*model, sequences);
  const std::size_t stored_high_water = model->activation_high_water_bytes();
  // Each module alone and all together; core_attn needs no flag (the attention keeps only out
  // and lse). qwen3_moe_a's layer 0 is a dense MLP (mlp), qwen3_5_moe_b has a shared expert.
  using config::SelectiveRecompute;
  for (const SelectiveRecompute m :
       {SelectiveRecompute{.moe_act = true}, SelectiveRecompute{.layernorm = true},
        SelectiveRecompute{.mlp = true}, SelectiveRecompute{.shared_experts = true},
        SelectiveRecompute{true, true, true, true}}) {
    INFO("recomputed: " << config::dropped_modules(m));
    model->set_recompute_selective(m);
    const auto recomputed = testing::run_batch(*model, sequences);
    CHECK(recomputed.result.loss_sum == stored.result.loss_sum);
    CHECK(recomputed.result.aux_loss == stored.result.aux_loss);
    CHECK(recomputed.per_token_loss == stored.per_token_loss);
    CHECK(recomputed.grads == stored.grads);
  }
  // A fresh model that recomputes keeps less (arenas only grow, so not the same model), and
  // the module of this fixture's MLP (a dense layer, or the shared expert) less again.
  options.selective = {.moe_act = true, .layernorm = true};
  const auto selective = load_hf_model(testing::fixture_dir(fixture), options);
  testing::run_batch(*selective, sequences);
  CHECK(selective->activation_high_water_bytes() < stored_high_water);
  options.selective.mlp = options.selective.shared_experts = true;
  const auto whole_mlps = load_hf_model(testing::fixture_dir(fixture), options);
  testing::run_batch(*whole_mlps, sequences);
  CHECK(whole_mlps->activation_high_water_bytes() < selective->activation_high_water_bytes());
}

TEST_CASE("block recompute keeps the activations of the layers it does not recompute", "[model]") {
  const auto model = load_hf_model(testing::fixture_dir("qwen3_moe_a"));
  const auto sequences = read_batch_json(testing::fixture_dir("qwen3_moe_a") + "/batch.json");
  const auto high_water = [&](bool recompute, std::int64_t first_layers) {
    model->set_recompute_full(recompute, first_layers);
    testing::run_batch(*model, sequences);
    return model->activation_high_water_bytes();
  };
  // Arenas only grow: measure from the least memory to the most.
  const std::size_t every_layer = high_water(true, -1);
  const std::size_t first_layer = high_water(true, 1);
  const std::size_t none = high_water(false, -1);
  CHECK(every_layer < first_layer);
  CHECK(first_layer < none);
}

TEST_CASE("parameter gradients accumulate across bins", "[model]") {
  const std::string fixture = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b");
  INFO("fixture " << fixture);
  const auto model = load_hf_model(testing::fixture_dir(fixture));
  const auto sequences = read_batch_json(testing::fixture_dir(fixture) + "/batch.json");
  const auto once = testing::run_batch(*model, sequences);
  // A second bin without zeroing: every gradient doubles (to round-off: a sum over tokens is
  // continued, not restarted, so the additions associate differently).
  const auto packed = pack_sequences(sequences);
  LocalSeams seams;
  BinOptions options;
  options.loss_grad_scale = 1.0 / static_cast<double>(once.result.loss_tokens);
  model->run_bin(packed.bin, seams.seams(), options);
  const auto& grads = model->parameters().all_grads();
  std::vector<float> doubled(once.grads.size());
  for (std::size_t i = 0; i < doubled.size(); ++i) doubled[i] = 2.0f * once.grads[i];
  const std::vector<float> twice(grads.data<float>(), grads.data<float>() + grads.numel());
  CHECK(max_relative_gap(twice, doubled) <= 1e-6);
  CHECK(max_relative_gap(twice, once.grads) > 0.5);
}

TEST_CASE("steady-state bins allocate no heap memory", "[model]") {
  const std::string fixture = GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b");
  INFO("fixture " << fixture);
  ModelOptions options;
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
  GENERATE(false, true) ? options.recompute_full = true : options.recompute_full = false;
  const auto model = load_hf_model(testing::fixture_dir(fixture), options);
  const auto sequences = read_batch_json(testing::fixture_dir(fixture) + "/batch.json");
  const auto packed = pack_sequences(sequences);
  LocalSeams seams;
  BinOptions bin_options;
  bin_options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());
  for (int warm_up = 0; warm_up < 2; ++warm_up)
    model->run_bin(packed.bin, seams.seams(), bin_options);
  const std::size_t high_water = model->activation_high_water_bytes();
  core::AllocationCounter counter;
  for (int step = 0; step < 3; ++step) model->run_bin(packed.bin, seams.seams(), bin_options);
  CHECK(counter.count() == 0);
  CHECK(model->activation_high_water_bytes() == high_water);
}

TEST_CASE("the aux loss leaves the cross-entropy alone and reaches the router gradients",
          "[model]") {
  const auto sequences = read_batch_json(testing::fixture_dir(fixture) + "/batch.json");
  const auto plain_model = load_hf_model(testing::fixture_dir(fixture));
  const auto plain = testing::run_batch(*plain_model, sequences);
  ModelOptions options;
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
  const auto aux_model = load_hf_model(testing::fixture_dir(fixture), options);
  const auto packed = pack_sequences(sequences);
  LocalSeams seams;
  BinOptions bin_options;
  bin_options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());
  bin_options.loss_grad_scale = 1.0 / static_cast<double>(plain.result.loss_tokens);
  const auto result = aux_model->run_bin(packed.bin, seams.seams(), bin_options);
  CHECK(result.loss_sum == plain.result.loss_sum);
  // Two MoE layers, coefficient 1e-3, each layer's per-sequence loss >= 1 (1 when balanced).
  CHECK(result.aux_loss >= 2e-3);
  CHECK(result.aux_loss < 2e-3 * aux_model->architecture().num_experts);
  for (const auto& tensor : aux_model->parameters().hf_tensors()) {
    const auto* plain_tensor = plain_model->parameters().find(tensor.name);
    double diff = 0.0;
    const float* ours = tensor.grad.data<float>();
    const float* reference = plain_tensor->grad.data<float>();
    for (std::int64_t i = 0; i < tensor.grad.numel(); ++i) diff += std::abs(ours[i] - reference[i]);
    INFO(tensor.name);
    // Its gradient flows from the routers back through the residual stream into everything
    // below them, so only the routers are sure to change.
    if (tensor.name.ends_with("mlp.gate.weight")) CHECK(diff > 0.0);
  }
}

TEST_CASE("forced load balancing routes uniformly and the routers still train", "[model]") {
  const auto sequences = read_batch_json(testing::fixture_dir(fixture) + "/batch.json");
  const auto packed = pack_sequences(sequences);
  const auto run = [&](bool force) {
    ModelOptions options;
    options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
    options.moe_router_force_load_balancing = force;
    auto model = load_hf_model(testing::fixture_dir(fixture), options);
    LocalSeams seams;
    BinOptions bin_options;
    bin_options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());
    bin_options.loss_grad_scale = 1e-2;
    const auto result = model->run_bin(packed.bin, seams.seams(), bin_options);
    double router_grad = 0.0;
    for (const auto& tensor : model->parameters().hf_tensors()) {
      if (!tensor.name.ends_with("mlp.gate.weight")) continue;
      for (std::int64_t i = 0; i < tensor.grad.numel(); ++i)
        router_grad += std::abs(tensor.grad.data<float>()[i]);
    }
    return std::pair{result, router_grad};
  };
  const auto [learned, learned_router_grad] = run(false);
  const auto [forced, forced_router_grad] = run(true);
  // Other experts, so another loss; the aux loss of uniform counts is Σ_e P_e = 1 per layer and
  // sequence (up to one token's share per expert), below the learned router's.
  CHECK(forced.loss_sum != learned.loss_sum);
  CHECK(forced.aux_loss < learned.aux_loss);
  CHECK(forced.aux_loss == Approx(2e-3).epsilon(0.05));
  CHECK(forced_router_grad > 0.0);
  CHECK(learned_router_grad > 0.0);
}

TEST_CASE("seeded initialisation is deterministic and has the requested scale", "[model]") {
  const auto architecture = config::load_hf_model_config(testing::fixture_dir(fixture));
  Qwen3MoeParameters first(architecture), second(architecture), other(architecture);
  first.init_random(7, 0.02);
  second.init_random(7, 0.02);
  other.init_random(8, 0.02);
  const auto& a = first.all_values();
  const auto& b = second.all_values();
  const auto& c = other.all_values();
  REQUIRE(std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>()));
  CHECK_FALSE(std::equal(a.data<float>(), a.data<float>() + a.numel(), c.data<float>()));
  const auto* embedding = first.find("model.embed_tokens.weight");
  double sum = 0.0, sum_squares = 0.0;
  for (std::int64_t i = 0; i < embedding->value.numel(); ++i) {
    sum += embedding->value.data<float>()[i];
    sum_squares += double(embedding->value.data<float>()[i]) * embedding->value.data<float>()[i];
  }
  const double count = static_cast<double>(embedding->value.numel());
  CHECK(std::abs(sum / count) < 1e-3);
  CHECK(std::sqrt(sum_squares / count) == Approx(0.02).epsilon(0.02));
  const auto* norm = first.find("model.norm.weight");
  CHECK(norm->value.data<float>()[0] == 1.0f);
}

}  // namespace
}  // namespace dyncp::model

namespace dyncp::model {
namespace {

TEST_CASE("dense and expert parameters are two contiguous ranges of the flat buffers", "[model]") {
  const auto architecture = config::load_hf_model_config(testing::fixture_dir("qwen3_moe_a"));
  const Qwen3MoeParameters parameters(architecture);
  const float* dense_begin = parameters.dense_grads().data<float>();
  const float* expert_begin = parameters.expert_grads().data<float>();
  const float* end = parameters.all_grads().data<float>() + parameters.all_grads().numel();
  CHECK(parameters.dense_grads().numel() + parameters.expert_grads().numel() ==
        parameters.num_parameters());
  std::int64_t expert_elements = 0;
  for (const auto& tensor : parameters.hf_tensors()) {
    const float* grad = tensor.grad.data<float>();
    INFO(tensor.name);
    CHECK(tensor.is_expert == (tensor.name.find(".mlp.experts.") != std::string::npos));
    if (tensor.is_expert) {
      expert_elements += tensor.grad.numel();
      CHECK((grad >= expert_begin && grad + tensor.grad.numel() <= end));
    } else {
      CHECK((grad >= dense_begin && grad + tensor.grad.numel() <= expert_begin));
    }
  }
  // 2 MoE layers x 8 experts x (gate 48x64 + up 48x64 + down 64x48).
  CHECK(expert_elements == 2 * 8 * 3 * 48 * 64);
  CHECK(parameters.expert_grads().numel() == expert_elements);
}

}  // namespace
}  // namespace dyncp::model
