// Router (softmax → top-k → renormalise), load-balancing aux loss, permute / unpermute.

#include <cmath>
#include <numeric>
#include <vector>

#include "op_test_utils.hpp"
#include "ops/moe_aux_loss.hpp"
#include "ops/permute.hpp"
#include "ops/router.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

// Logits whose softmax has a clear gap between every pair of experts (no near ties), so top-k is
// stable under finite-difference perturbations.
Tensor tie_free_logits(std::int64_t tokens, std::int64_t experts, std::uint64_t seed) {
  Tensor logits = Tensor::empty(Shape{tokens, experts}, DType::f64);
  dyncp::core::Rng rng(99, dyncp::core::RngPurpose::test, seed);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    for (std::int64_t i = experts - 1; i > 0; --i) {
      std::swap(order[static_cast<std::size_t>(i)],
                order[rng.below(static_cast<std::uint64_t>(i + 1))]);
    }
    for (std::int64_t e = 0; e < experts; ++e) {
      set_element(logits, t * experts + order[static_cast<std::size_t>(e)],
                  0.4 * e + 0.1 * rng.uniform());
    }
  }
  return logits;
}

}  // namespace

TEST_CASE("router picks the k largest probabilities and renormalises", "[ops][router]") {
  const OpContext ctx;
  const Tensor logits = Tensor::empty(Shape{1, 4}, DType::f64);
  const double values[] = {0.5, 2.0, -1.0, 1.0};
  for (int e = 0; e < 4; ++e) set_element(logits, e, values[e]);
  const bool normalize = GENERATE(false, true);
  const Tensor ids = Tensor::empty(Shape{1, 2}, DType::i32);
  const Tensor weights = Tensor::empty(Shape{1, 2}, DType::f64);
  RouterSaved saved{Tensor::empty(Shape{1, 4}, DType::f64)};
  router_forward(ctx, logits, 2, normalize, ids, weights, saved);
  CHECK(ids.data<std::int32_t>()[0] == 1);
  CHECK(ids.data<std::int32_t>()[1] == 3);
  double z = 0;
  for (double v : values) z += std::exp(v);
  const double p1 = std::exp(2.0) / z, p3 = std::exp(1.0) / z;
  CHECK(element(saved.probs, 1) == Approx(p1));
  CHECK(element(weights, 0) == Approx(normalize ? p1 / (p1 + p3) : p1));
  CHECK(element(weights, 1) == Approx(normalize ? p3 / (p1 + p3) : p3));
  // Exact ties go to the lower index.
  for (int e = 0; e < 4; ++e) set_element(logits, e, 1.0);
  router_forward(ctx, logits, 2, normalize, ids, weights, saved);
  CHECK(ids.data<std::int32_t>()[0] == 0);
  CHECK(ids.data<std::int32_t>()[1] == 1);
}

TEST_CASE("router backward matches finite differences", "[ops][router][fd]") {
  const OpContext ctx;
  const bool normalize = GENERATE(false, true);
  const std::int64_t tokens = GENERATE(1, 5), experts = 7, top_k = GENERATE(1, 3);
  const Tensor logits = tie_free_logits(tokens, experts, 3);
  const Tensor ids = Tensor::empty(Shape{tokens, top_k}, DType::i32);
  const Tensor weights = Tensor::empty(Shape{tokens, top_k}, DType::f64);
  RouterSaved saved{Tensor::empty(Shape{tokens, experts}, DType::f64)};
  const Tensor dweights = random_tensor(weights.shape(), DType::f64, 4);
  router_forward(ctx, logits, static_cast<int>(top_k), normalize, ids, weights, saved);
  const Tensor dlogits = Tensor::empty(logits.shape(), DType::f64);
  router_backward(ctx, dweights, ids, weights, saved, normalize, dlogits);
  const Tensor ids_probe = Tensor::empty(ids.shape(), DType::i32);
  auto loss = [&] {
    router_forward(ctx, logits, static_cast<int>(top_k), normalize, ids_probe, weights, saved);
    for (std::int64_t i = 0; i < ids.numel(); ++i)
      REQUIRE(ids_probe.data<std::int32_t>()[i] == ids.data<std::int32_t>()[i]);
    return dot(weights, dweights);
  };
  CHECK(finite_difference_error(logits, dlogits, loss) < kFdTolerance);
}

TEST_CASE("aux loss: balanced routing gives coef, and the value follows the formula",
          "[ops][aux_loss]") {
  const OpContext ctx;
  // One sequence, 4 tokens, E = 4, k = 1, each expert chosen once with uniform probabilities.
  const Tensor probs = Tensor::empty(Shape{4, 4}, DType::f64);
  for (int i = 0; i < 16; ++i) set_element(probs, i, 0.25);
  const Tensor ids = Tensor::empty(Shape{4, 1}, DType::i32);
  for (int t = 0; t < 4; ++t) ids.data<std::int32_t>()[t] = t;
  const Tensor counts = Tensor::empty(Shape{1, 4}, DType::f64),
               sums = Tensor::empty(Shape{1, 4}, DType::f64);
  const Tensor coeff = Tensor::empty(Shape{1, 4}, DType::f64);
  moe_aux_loss_statistics(ctx, probs, ids, int_tensor({0, 4}), Tensor(), counts, sums);
  CHECK(moe_aux_loss_finish(ctx, counts, sums, 1, 0.001, 1, coeff) == Approx(0.001));
  // All tokens on expert 0 with probability 1: L = E / (k n²) · n · n = E.
  for (int t = 0; t < 4; ++t) {
    ids.data<std::int32_t>()[t] = 0;
    for (int e = 0; e < 4; ++e) set_element(probs, t * 4 + e, e == 0 ? 1.0 : 0.0);
  }
  moe_aux_loss_statistics(ctx, probs, ids, int_tensor({0, 4}), Tensor(), counts, sums);
  CHECK(moe_aux_loss_finish(ctx, counts, sums, 1, 1.0, 2, coeff) == Approx(4.0 / 2));
}

TEST_CASE("aux loss gradient matches finite differences, padding excluded", "[ops][aux_loss][fd]") {
  const OpContext ctx;
  const std::int64_t tokens = 9, experts = 5, top_k = 2;
  const Tensor cu = int_tensor({0, 4, 4, 9});  // an empty sequence in the middle
  const Tensor real = Tensor::empty(Shape{tokens}, DType::u8);
  for (int t = 0; t < tokens; ++t) real.data<std::uint8_t>()[t] = (t == 3 || t == 8) ? 0 : 1;
  const Tensor logits = tie_free_logits(tokens, experts, 7);
  const Tensor ids = Tensor::empty(Shape{tokens, top_k}, DType::i32);
  const Tensor weights = Tensor::empty(Shape{tokens, top_k}, DType::f64);
  RouterSaved saved{Tensor::empty(logits.shape(), DType::f64)};
  const Tensor counts = Tensor::empty(Shape{3, experts}, DType::f64),
               sums = Tensor::empty(Shape{3, experts}, DType::f64);
  const Tensor coeff = Tensor::empty(Shape{3, experts}, DType::f64);
  const double coef = 0.01;
  auto loss = [&] {
    router_forward(ctx, logits, top_k, true, ids, weights, saved);
    moe_aux_loss_statistics(ctx, saved.probs, ids, cu, real, counts, sums);
    return moe_aux_loss_finish(ctx, counts, sums, top_k, coef, 6, coeff);
  };
  loss();
  CHECK(element(counts, 0 * experts + 0) + element(counts, 0 * experts + 1) +
            element(counts, 0 * experts + 2) + element(counts, 0 * experts + 3) +
            element(counts, 0 * experts + 4) ==
        6.0);  // 3 real tokens × k
  const Tensor dlogits = Tensor::zeros(logits.shape(), DType::f64);
  moe_aux_loss_backward(ctx, saved.probs, cu, real, coeff, dlogits);
  CHECK(finite_difference_error(logits, dlogits, loss) < kFdTolerance);
  for (int e = 0; e < experts; ++e) CHECK(element(dlogits, 3 * experts + e) == 0.0);  // padding row
}

TEST_CASE("aux loss statistics split across ranks and summed equal the whole",
          "[ops][aux_loss][cp]") {
  const OpContext ctx;
  const std::int64_t experts = 4, top_k = 2;
  const Tensor logits = tie_free_logits(8, experts, 11);
  const Tensor ids = Tensor::empty(Shape{8, top_k}, DType::i32);
  const Tensor weights = Tensor::empty(Shape{8, top_k}, DType::f64);
  RouterSaved saved{Tensor::empty(logits.shape(), DType::f64)};
  router_forward(ctx, logits, top_k, false, ids, weights, saved);
  const Tensor counts = Tensor::empty(Shape{1, experts}, DType::f64),
               sums = Tensor::empty(Shape{1, experts}, DType::f64);
  moe_aux_loss_statistics(ctx, saved.probs, ids, int_tensor({0, 8}), Tensor(), counts, sums);
  // Zigzag halves: rows {0,1,6,7} and {2,3,4,5} of the same sequence.
  const Tensor total_counts = Tensor::zeros(counts.shape(), DType::f64),
               total_sums = Tensor::zeros(sums.shape(), DType::f64);
  for (const std::vector<std::int64_t>& rows :
       {std::vector<std::int64_t>{0, 1, 6, 7}, std::vector<std::int64_t>{2, 3, 4, 5}}) {
    const Tensor p = Tensor::empty(Shape{4, experts}, DType::f64),
                 i = Tensor::empty(Shape{4, top_k}, DType::i32);
    for (std::size_t r = 0; r < 4; ++r) {
      p.select(static_cast<std::int64_t>(r)).copy_from(saved.probs.select(rows[r]));
      i.select(static_cast<std::int64_t>(r)).copy_from(ids.select(rows[r]));
    }
    const Tensor c = Tensor::empty(counts.shape(), DType::f64),
                 s = Tensor::empty(sums.shape(), DType::f64);
    moe_aux_loss_statistics(ctx, p, i, int_tensor({0, 4}), Tensor(), c, s);
    for (int e = 0; e < experts; ++e) {
      set_element(total_counts, e, element(total_counts, e) + element(c, e));
      set_element(total_sums, e, element(total_sums, e) + element(s, e));
    }
  }
  require_close(total_counts, counts, 0, 0, "counts");
  require_close(total_sums, sums, 1e-14, 1e-14, "prob sums");
}

TEST_CASE("permute plan matches the documented example", "[ops][permute]") {
  const OpContext ctx;
  const Tensor ids = Tensor::empty(Shape{3, 2}, DType::i32);
  const std::int32_t values[] = {2, 0, 0, 1, 2, 1};
  for (int i = 0; i < 6; ++i) ids.data<std::int32_t>()[i] = values[i];
  PermutePlan plan{Tensor::empty(Shape{6}, DType::i32), Tensor::empty(Shape{6}, DType::i32),
                   Tensor::empty(Shape{4}, DType::i64), Tensor::empty(Shape{3}, DType::i64)};
  build_permute_plan(ctx, ids, 3, plan);
  const std::int32_t order[] = {1, 2, 3, 5, 0, 4}, rows[] = {4, 0, 1, 2, 5, 3};
  const std::int64_t offsets[] = {0, 2, 4, 6};
  for (int i = 0; i < 6; ++i) {
    CHECK(plan.expert_order.data<std::int32_t>()[i] == order[i]);
    CHECK(plan.assignment_row.data<std::int32_t>()[i] == rows[i]);
  }
  for (int i = 0; i < 4; ++i) CHECK(plan.expert_offsets.data<std::int64_t>()[i] == offsets[i]);
  ids.data<std::int32_t>()[3] = 3;
  CHECK_THROWS_WITH(build_permute_plan(ctx, ids, 3, plan), Catch::Contains("token 1"));
}

TEST_CASE("permute / unpermute round trip and backward", "[ops][permute][fd]") {
  const OpContext ctx;
  const std::int64_t tokens = GENERATE(1, 7), top_k = GENERATE(1, 2), experts = 5, hidden = 3;
  const Tensor ids = Tensor::empty(Shape{tokens, top_k}, DType::i32);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t j = 0; j < top_k; ++j)
      ids.data<std::int32_t>()[t * top_k + j] =
          static_cast<std::int32_t>((3 * t + 2 * j) % experts);
  }
  PermutePlan plan{Tensor::empty(Shape{tokens * top_k}, DType::i32),
                   Tensor::empty(Shape{tokens * top_k}, DType::i32),
                   Tensor::empty(Shape{experts + 1}, DType::i64),
                   Tensor::empty(Shape{experts}, DType::i64)};
  build_permute_plan(ctx, ids, experts, plan);
  const Tensor x = random_tensor(Shape{tokens, hidden}, DType::f64, 12);
  const Tensor x_perm = Tensor::empty(Shape{tokens * top_k, hidden}, DType::f64);
  permute_forward(ctx, x, plan, x_perm);
  // Unpermute with weights 1/k restores x.
  const Tensor weights = Tensor::empty(Shape{tokens, top_k}, DType::f64);
  for (std::int64_t i = 0; i < weights.numel(); ++i)
    set_element(weights, i, 1.0 / static_cast<double>(top_k));
  const Tensor y = Tensor::empty(x.shape(), DType::f64);
  unpermute_forward(ctx, x_perm, plan, weights, y);
  require_close(y, x, 1e-14, 1e-14, "round trip");
  // Rows are grouped by expert.
  for (std::int64_t e = 0; e < experts; ++e) {
    for (std::int64_t r = plan.expert_offsets.data<std::int64_t>()[e];
         r < plan.expert_offsets.data<std::int64_t>()[e + 1]; ++r) {
      CHECK(ids.data<std::int32_t>()[plan.expert_order.data<std::int32_t>()[r]] == e);
    }
  }
  // Finite differences of the composite permute → scale rows → unpermute with random weights.
  const Tensor w = random_tensor(weights.shape(), DType::f64, 13);
  const Tensor dy = random_tensor(y.shape(), DType::f64, 14);
  auto loss = [&] {
    permute_forward(ctx, x, plan, x_perm);
    unpermute_forward(ctx, x_perm, plan, w, y);
    return dot(y, dy);
  };
  loss();
  const Tensor dx_perm = Tensor::empty(x_perm.shape(), DType::f64),
               dw = Tensor::empty(w.shape(), DType::f64);
  unpermute_backward(ctx, dy, x_perm, plan, w, dx_perm, dw);
  const Tensor dx = Tensor::empty(x.shape(), DType::f64);
  permute_backward(ctx, dx_perm, plan, dx);
  CHECK(finite_difference_error(x, dx, loss) < kFdTolerance);
  CHECK(finite_difference_error(w, dw, loss) < kFdTolerance);
}

TEST_CASE("uniform routing takes experts from the positions, weights from the softmax",
          "[ops][router]") {
  const OpContext ctx;
  const std::int64_t tokens = 48, experts = 8;
  const int top_k = 2, layer = 3;
  const bool normalize = GENERATE(false, true);
  const Tensor logits = tie_free_logits(tokens, experts, 7);
  const Tensor positions = Tensor::empty(Shape{tokens}, DType::i32);
  // Two sequences packed in one bin: positions 0..23, then 0..23 again.
  for (std::int64_t t = 0; t < tokens; ++t)
    positions.data<std::int32_t>()[t] = static_cast<std::int32_t>(t % 24);
  const Tensor ids = Tensor::empty(Shape{tokens, top_k}, DType::i32);
  const Tensor weights = Tensor::empty(Shape{tokens, top_k}, DType::f64);
  RouterSaved saved{Tensor::empty(Shape{tokens, experts}, DType::f64)};
  balanced_router_forward(ctx, logits, positions, layer, top_k, normalize, ids, weights, saved);
  // The same probabilities as the learned router's.
  const Tensor learned_ids = Tensor::empty(Shape{tokens, top_k}, DType::i32);
  const Tensor learned_weights = Tensor::empty(Shape{tokens, top_k}, DType::f64);
  RouterSaved learned{Tensor::empty(Shape{tokens, experts}, DType::f64)};
  router_forward(ctx, logits, top_k, normalize, learned_ids, learned_weights, learned);
  std::vector<std::int64_t> load(static_cast<std::size_t>(experts), 0);
  std::int64_t differs = 0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    double selected = 0;
    for (int j = 0; j < top_k; ++j) {
      const std::int32_t id = ids.data<std::int32_t>()[t * top_k + j];
      CHECK(id == ((t % 24) * top_k + j + layer) % experts);
      selected += element(saved.probs, t * experts + id);
      ++load[static_cast<std::size_t>(id)];
      differs += id != learned_ids.data<std::int32_t>()[t * top_k + j];
    }
    for (int j = 0; j < top_k; ++j) {
      const std::int32_t id = ids.data<std::int32_t>()[t * top_k + j];
      const double p = element(saved.probs, t * experts + id);
      CHECK(p == Approx(element(learned.probs, t * experts + id)));
      CHECK(element(weights, t * top_k + j) == Approx(normalize ? p / selected : p));
    }
  }
  // Every expert gets the same share of each sequence, which the logits alone would not give.
  for (const std::int64_t count : load) CHECK(count == tokens * top_k / experts);
  CHECK(differs > 0);
}

TEST_CASE("uniform routing's router gradient matches finite differences", "[ops][router]") {
  const OpContext ctx;
  const std::int64_t tokens = 5, experts = 6;
  const int top_k = 2;
  const bool normalize = GENERATE(false, true);
  Tensor logits = tie_free_logits(tokens, experts, 11);
  const Tensor positions = Tensor::empty(Shape{tokens}, DType::i32);
  for (std::int64_t t = 0; t < tokens; ++t) positions.data<std::int32_t>()[t] = 7 + 3 * t;
  const Tensor dweights = random_tensor(Shape{tokens, top_k}, DType::f64, 5);
  const auto loss = [&](const Tensor& l) {
    const Tensor ids = Tensor::empty(Shape{tokens, top_k}, DType::i32);
    const Tensor w = Tensor::empty(Shape{tokens, top_k}, DType::f64);
    RouterSaved s{Tensor::empty(Shape{tokens, experts}, DType::f64)};
    balanced_router_forward(ctx, l, positions, 1, top_k, normalize, ids, w, s);
    double sum = 0;
    for (std::int64_t i = 0; i < tokens * top_k; ++i) sum += element(w, i) * element(dweights, i);
    return sum;
  };
  const Tensor ids = Tensor::empty(Shape{tokens, top_k}, DType::i32);
  const Tensor w = Tensor::empty(Shape{tokens, top_k}, DType::f64);
  RouterSaved saved{Tensor::empty(Shape{tokens, experts}, DType::f64)};
  balanced_router_forward(ctx, logits, positions, 1, top_k, normalize, ids, w, saved);
  const Tensor dlogits = Tensor::empty(Shape{tokens, experts}, DType::f64);
  router_backward(ctx, dweights, ids, w, saved, normalize, dlogits);
  const double h = 1e-6;
  for (std::int64_t i = 0; i < tokens * experts; ++i) {
    const double v = element(logits, i);
    set_element(logits, i, v + h);
    const double up = loss(logits);
    set_element(logits, i, v - h);
    const double down = loss(logits);
    set_element(logits, i, v);
    CHECK(element(dlogits, i) == Approx((up - down) / (2 * h)).margin(1e-8));
  }
}
