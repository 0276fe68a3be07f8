// The Gated DeltaNet op chain against HF transformers (Qwen3-Next modeling functions, fp32):
// conv1d + SiLU, L2 norm, gates, chunked gated delta rule with initial / final states, gated
// RMSNorm; forward and every gradient. Fixture: tests/fixtures/ops/gated_delta.json, written by
// tools/golden/ops/make_gated_delta_fixture.py.

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "op_test_utils.hpp"
#include "ops/causal_conv1d.hpp"
#include "ops/gated_delta_gates.hpp"
#include "ops/gated_delta_rule.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/l2norm.hpp"

namespace dyncp::ops::test {
namespace {

// HF runs in fp32; every value here is an fp32 value, computed again in f64. Norm-wise relative
// errors measured: 6e-8 (conv) to 5e-7 (gradients through the whole chain), so 5e-6 is ten
// times the fp32 round-off seen, and far below any formula error (those are O(1e-2) or more).
constexpr double kGoldenTolerance = 5e-6;

Tensor load(const nlohmann::json& entry) {
  Shape shape;
  for (const auto& dim : entry.at("shape")) shape.push_back(dim.get<std::int64_t>());
  Tensor t = Tensor::empty(shape, DType::f64);
  const auto& data = entry.at("data");
  REQUIRE(static_cast<std::int64_t>(data.size()) == t.numel());
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = data[i].get<double>();
  return t;
}

void check_against(const std::string& name, const Tensor& actual, const nlohmann::json& expected) {
  const Tensor reference = load(expected.at(name));
  INFO(name << ": " << actual.describe() << " vs HF " << reference.describe());
  REQUIRE(actual.numel() == reference.numel());
  CHECK(relative_error(actual, reference) < kGoldenTolerance);
}

// Columns [begin, begin + width) of every row of m [T, C] into out (numel T·width).
void copy_columns(const Tensor& m, std::int64_t begin, std::int64_t width, const Tensor& out,
                  bool into_m = false) {
  const std::int64_t rows = m.size(0), cols = m.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < width; ++j) {
      double& a = m.data<double>()[r * cols + begin + j];
      double& b = out.data<double>()[r * width + j];
      if (into_m) {
        a = b;
      } else {
        b = a;
      }
    }
  }
}

}  // namespace

TEST_CASE("Gated DeltaNet op chain matches HF transformers forward and backward",
          "[ops][gdn][golden]") {
  const bool chunked = GENERATE(true, false);
  std::ifstream file(std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/ops/gated_delta.json");
  REQUIRE(file.good());
  const auto fixture = nlohmann::json::parse(file);
  const auto& config = fixture.at("config");
  const auto& inputs = fixture.at("inputs");
  const auto& expected = fixture.at("expected");
  const std::int64_t hk = config.at("key_heads"), hv = config.at("value_heads"),
                     dk = config.at("key_dim"), dv = config.at("value_dim");
  const int chunk_size = config.at("chunk_size");
  const double l2_eps = config.at("l2norm_eps"), rms_eps = config.at("rms_norm_eps");
  const Tensor cu = int_tensor(fixture.at("cu_seqlens").get<std::vector<std::int32_t>>());
  const Tensor mixed = load(inputs.at("mixed")), conv_w = load(inputs.at("conv_weight"));
  const Tensor z = load(inputs.at("z")), a = load(inputs.at("a")), b = load(inputs.at("b"));
  const Tensor a_log = load(inputs.at("A_log")), dt_bias = load(inputs.at("dt_bias"));
  const Tensor norm_w = load(inputs.at("norm_weight")), init = load(inputs.at("initial_state"));
  const Tensor dy = load(inputs.at("dy")), d_final = load(inputs.at("d_final"));
  const std::int64_t tokens = mixed.size(0), key_size = hk * dk;
  const auto f64 = [](const Shape& shape) { return Tensor::empty(shape, DType::f64); };

  core::Arena arena("golden");
  const OpContext ctx{core::Device::cpu, &arena};
  // Forward.
  const Tensor conv = f64(mixed.shape());
  causal_conv1d_silu_forward(ctx, mixed, conv_w, cu, conv);
  check_against("conv", conv, expected);
  const Tensor q = f64({tokens, hk, dk}), k = f64({tokens, hk, dk}), v = f64({tokens, hv, dv});
  copy_columns(conv, 0, key_size, q);
  copy_columns(conv, key_size, key_size, k);
  copy_columns(conv, 2 * key_size, hv * dv, v);
  const Tensor qn = f64(q.shape()), kn = f64(k.shape());
  L2NormSaved q_saved{f64({tokens * hk})}, k_saved{f64({tokens * hk})};
  l2norm_forward(ctx, q, l2_eps, qn, q_saved);
  l2norm_forward(ctx, k, l2_eps, kn, k_saved);
  const Tensor g = f64({tokens, hv}), beta = f64({tokens, hv});
  gated_delta_gates_forward(ctx, a, b, a_log, dt_bias, g, beta);
  const GatedDeltaRuleInputs in{qn, kn, v, g, beta, cu, init};
  const GatedDeltaRuleParams params{1.0 / std::sqrt(static_cast<double>(dk)), chunk_size};
  const Tensor core = f64({tokens, hv, dv}), final_state = f64(init.shape());
  GatedDeltaRuleSaved saved;
  if (chunked) {
    gated_delta_rule_chunked_forward(ctx, in, params, core, final_state, saved);
  } else {
    gated_delta_rule_recurrent_forward(ctx, in, params, core, final_state);
  }
  check_against("core", core, expected);
  check_against("final_state", final_state, expected);
  const Tensor y = f64(core.shape());
  RmsNormSaved norm_saved{f64({tokens * hv})};
  gated_rmsnorm_forward(ctx, core, z, norm_w, rms_eps, y, norm_saved);
  check_against("y", y, expected);

  // Backward.
  const Tensor dcore = f64(core.shape()), dz = f64(z.shape()),
               dnorm_w = Tensor::zeros(norm_w.shape(), DType::f64);
  gated_rmsnorm_backward(ctx, dy, core, z, norm_w, norm_saved, dcore, dz, dnorm_w);
  check_against("d_z", dz, expected);
  check_against("d_norm_weight", dnorm_w, expected);
  GatedDeltaRuleGrads grads{f64(q.shape()), f64(k.shape()),    f64(v.shape()),
                            f64(g.shape()), f64(beta.shape()), f64(init.shape())};
  if (chunked) {
    gated_delta_rule_chunked_backward(ctx, dcore, d_final, in, params, saved, grads);
  } else {
    gated_delta_rule_recurrent_backward(ctx, dcore, d_final, in, params, grads);
  }
  check_against("d_initial_state", grads.d_initial_state, expected);
  const Tensor dq = f64(q.shape()), dk_raw = f64(k.shape());
  l2norm_backward(ctx, grads.dq, qn, q_saved, dq);
  l2norm_backward(ctx, grads.dk, kn, k_saved, dk_raw);
  const Tensor da = f64(a.shape()), db = f64(b.shape());
  const Tensor da_log = Tensor::zeros(a_log.shape(), DType::f64);
  const Tensor ddt_bias = Tensor::zeros(dt_bias.shape(), DType::f64);
  gated_delta_gates_backward(ctx, grads.dg, grads.dbeta, a, b, a_log, dt_bias, da, db, da_log,
                             ddt_bias);
  check_against("d_a", da, expected);
  check_against("d_b", db, expected);
  check_against("d_A_log", da_log, expected);
  check_against("d_dt_bias", ddt_bias, expected);
  const Tensor dconv = f64(conv.shape());
  copy_columns(dconv, 0, key_size, dq, true);
  copy_columns(dconv, key_size, key_size, dk_raw, true);
  copy_columns(dconv, 2 * key_size, hv * dv, grads.dv, true);
  const Tensor dmixed = f64(mixed.shape()), dconv_w = Tensor::zeros(conv_w.shape(), DType::f64);
  causal_conv1d_silu_backward(ctx, dconv, mixed, conv_w, cu, dmixed, dconv_w);
  check_against("d_mixed", dmixed, expected);
  check_against("d_conv_weight", dconv_w, expected);
}

}  // namespace dyncp::ops::test
