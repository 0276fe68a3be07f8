// Embedding, RMSNorm and router kernels against lib/ops.
#include <algorithm>
#include <climits>

#include "gpu_test.hpp"
#include "ops.hpp"
#include "ops/embedding.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/router.hpp"

namespace dyncp::gpu_test {
namespace {

const ops::OpContext cpu{};

GPU_TEST(embedding_forward_backward) {
  const int tokens = 300, vocab = 50, hidden = 70;
  std::vector<std::int32_t> ids(tokens);
  for (int t = 0; t < tokens; ++t) ids[t] = (t * 7) % vocab;  // repeated ids: gradients add up
  std::vector<float> table = random_floats(vocab * hidden, 20),
                     dout = random_floats(tokens * hidden, 21);
  std::vector<float> out(tokens * hidden), dtable = random_floats(vocab * hidden, 22);
  const std::vector<float> dtable_start = dtable;
  ops::embedding_forward(cpu, view(ids, {tokens}), view(table, {vocab, hidden}),
                         view(out, {tokens, hidden}));
  ops::embedding_backward(cpu, view(ids, {tokens}), view(dout, {tokens, hidden}),
                          view(dtable, {vocab, hidden}));
  DeviceBuffer<std::int32_t> d_ids(ids), d_bad(std::vector<std::int32_t>{INT_MAX});
  DeviceBuffer<float> d_table(table), d_out(out.size()), d_dout(dout), d_dtable(dtable_start);
  kernels::embedding_forward(d_ids.get(), d_table.get(), d_out.get(), tokens, vocab, hidden,
                             d_bad.get(), nullptr);
  kernels::embedding_backward(d_ids.get(), d_dout.get(), d_dtable.get(), tokens, vocab, hidden,
                              /*padding_idx=*/-1, nullptr);
  expect_close("embedding forward", d_out.download(), out, 0.0, 0.0);
  expect_close("embedding backward (accumulates)", d_dtable.download(), dtable, kF32AtolRel,
               kF32Rtol);
  expect(d_bad.download()[0] == INT_MAX, "no bad id reported for valid ids");

  // padding_idx: that row (id 7, which the ids repeat) gets nothing, as on the CPU.
  std::vector<float> padded = dtable_start;
  ops::embedding_backward(cpu, view(ids, {tokens}), view(dout, {tokens, hidden}),
                          view(padded, {vocab, hidden}), /*padding_idx=*/7);
  d_dtable.upload(dtable_start);
  kernels::embedding_backward(d_ids.get(), d_dout.get(), d_dtable.get(), tokens, vocab, hidden,
                              /*padding_idx=*/7, nullptr);
  expect_close("embedding backward with a padding row", d_dtable.download(), padded, kF32AtolRel,
               kF32Rtol);
  expect(std::equal(padded.begin() + 7 * hidden, padded.begin() + 8 * hidden,
                    dtable_start.begin() + 7 * hidden),
         "the padding row is left as it was");

  ids[5] = vocab;  // out of range
  ids[9] = -1;
  d_ids.upload(ids);
  kernels::embedding_forward(d_ids.get(), d_table.get(), d_out.get(), tokens, vocab, hidden,
                             d_bad.get(), nullptr);
  expect(d_bad.download()[0] == 5, "the first out-of-range token index is reported");
}

void check_rmsnorm(int rows, int n, ops::RmsNormVariant variant, bool accumulate) {
  std::vector<float> x = random_floats(rows * n, 30, -3, 3), w = random_floats(n, 31);
  std::vector<float> dy = random_floats(rows * n, 32), y(rows * n), inv(rows);
  std::vector<float> dx = random_floats(rows * n, 33), dw = random_floats(n, 34);
  const std::vector<float> dx_start = dx, dw_start = dw;
  ops::RmsNormSaved saved{view(inv, {rows})};
  const bool plus = variant == ops::RmsNormVariant::one_plus_weight;
  ops::rmsnorm_forward(cpu, view(x, {rows, n}), view(w, {n}), 1e-6, variant, view(y, {rows, n}),
                       saved);
  ops::rmsnorm_backward(cpu, view(dy, {rows, n}), view(x, {rows, n}), view(w, {n}), variant, saved,
                        view(dx, {rows, n}), view(dw, {n}),
                        accumulate ? ops::GradMode::accumulate : ops::GradMode::overwrite);
  DeviceBuffer<float> d_x(x), d_w(w), d_dy(dy), d_y(y.size()), d_inv(rows), d_dx(dx_start),
      d_dw(dw_start);
  kernels::rmsnorm_forward(d_x.get(), d_w.get(), d_y.get(), d_inv.get(), rows, n, 1e-6f, plus,
                           nullptr);
  kernels::rmsnorm_backward(d_dy.get(), d_x.get(), d_w.get(), d_inv.get(), d_dx.get(), d_dw.get(),
                            rows, n, plus, accumulate, nullptr);
  const std::string name =
      "rmsnorm n=" + std::to_string(n) + (plus ? " (1+w)" : "") + (accumulate ? " accumulate" : "");
  expect_close(name + " y", d_y.download(), y, kF32AtolRel, kF32Rtol);
  expect_close(name + " inv_rms", d_inv.download(), inv, kF32AtolRel, kF32Rtol);
  expect_close(name + " dx", d_dx.download(), dx, kF32AtolRel, kF32Rtol);
  expect_close(name + " dweight", d_dw.download(), dw, kF32AtolRel, kF32Rtol);
}

GPU_TEST(rmsnorm_variants) {
  check_rmsnorm(33, 1000, ops::RmsNormVariant::plain, false);  // n not a multiple of the block
  check_rmsnorm(64, 128, ops::RmsNormVariant::one_plus_weight, true);
  check_rmsnorm(5, 7, ops::RmsNormVariant::plain, true);
}

void check_router(int tokens, int experts, int k, bool normalize) {
  std::vector<float> logits = random_floats(tokens * experts, 40, -3, 3);
  logits[3] = logits[5];  // a tie: the lower index wins on both sides
  std::vector<std::int32_t> ids(tokens * k);
  std::vector<float> weights(tokens * k), probs(tokens * experts), dlogits(tokens * experts);
  std::vector<float> dweights = random_floats(tokens * k, 41);
  ops::RouterSaved saved{view(probs, {tokens, experts})};
  ops::router_forward(cpu, view(logits, {tokens, experts}), k, normalize, view(ids, {tokens, k}),
                      view(weights, {tokens, k}), saved);
  ops::router_backward(cpu, view(dweights, {tokens, k}), view(ids, {tokens, k}),
                       view(weights, {tokens, k}), saved, normalize,
                       view(dlogits, {tokens, experts}));
  DeviceBuffer<float> d_logits(logits), d_weights(weights.size()), d_probs(probs.size()),
      d_dweights(dweights), d_dlogits(dlogits.size());
  DeviceBuffer<std::int32_t> d_ids(ids.size());
  kernels::router_forward(d_logits.get(), tokens, experts, k, normalize, d_ids.get(),
                          d_weights.get(), d_probs.get(), nullptr);
  kernels::router_backward(d_dweights.get(), d_ids.get(), d_weights.get(), d_probs.get(), tokens,
                           experts, k, normalize, d_dlogits.get(), nullptr);
  const std::string name = "router E=" + std::to_string(experts) + " k=" + std::to_string(k) +
                           (normalize ? " normalised" : "");
  expect(d_ids.download() == ids, name + ": expert ids equal the CPU's");
  expect_close(name + " probs", d_probs.download(), probs, kF32AtolRel, kF32Rtol);
  expect_close(name + " weights", d_weights.download(), weights, kF32AtolRel, kF32Rtol);
  expect_close(name + " dlogits", d_dlogits.download(), dlogits, kF32AtolRel, kF32Rtol);
}

// Uniform routing: the kernel's ids, probabilities and weights equal the CPU op's, and every
// expert gets tokens * k / E of a sequence of consecutive positions.
void check_balanced_router(int tokens, int experts, int k, int layer, bool normalize) {
  std::vector<float> logits = random_floats(tokens * experts, 42, -3, 3);
  std::vector<std::int32_t> positions(tokens);
  for (int t = 0; t < tokens; ++t) positions[t] = t;
  std::vector<std::int32_t> ids(tokens * k);
  std::vector<float> weights(tokens * k), probs(tokens * experts);
  ops::RouterSaved saved{view(probs, {tokens, experts})};
  ops::balanced_router_forward(cpu, view(logits, {tokens, experts}), view(positions, {tokens}),
                               layer, k, normalize, view(ids, {tokens, k}),
                               view(weights, {tokens, k}), saved);
  DeviceBuffer<float> d_logits(logits), d_weights(weights.size()), d_probs(probs.size());
  DeviceBuffer<std::int32_t> d_positions(positions), d_ids(ids.size());
  kernels::balanced_router_forward(d_logits.get(), d_positions.get(), tokens, experts, layer, k,
                                   normalize, d_ids.get(), d_weights.get(), d_probs.get(), nullptr);
  const std::string name = "balanced router E=" + std::to_string(experts) +
                           " k=" + std::to_string(k) + " layer " + std::to_string(layer);
  expect(d_ids.download() == ids, name + ": expert ids equal the CPU's");
  expect_close(name + " probs", d_probs.download(), probs, kF32AtolRel, kF32Rtol);
  expect_close(name + " weights", d_weights.download(), weights, kF32AtolRel, kF32Rtol);
  std::vector<int> load(experts, 0);
  for (const std::int32_t id : d_ids.download()) ++load[id];
  for (const int count : load) expect(count == tokens * k / experts, name + ": uniform load");
}

GPU_TEST(balanced_router) {
  check_balanced_router(64, 8, 2, 3, true);
  check_balanced_router(40, 10, 5, 0, false);
}

GPU_TEST(router_top_k) {
  check_router(200, 128, 8, true);
  check_router(37, 10, 3, false);
  check_router(1, 4, 4, true);
}

}  // namespace
}  // namespace dyncp::gpu_test
