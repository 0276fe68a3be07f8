// Gated delta rule: the chunked form against the token recurrence (forward, every gradient,
// initial / final states), finite differences, packing, GQA, f32 against f64, and splitting a
// sequence across two calls through the state hand-over (the context-parallel use).

#include "ops/gated_delta_rule.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "op_test_utils.hpp"

namespace dyncp::ops::test {
namespace {

struct Problem {
  std::int64_t tokens = 0, key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  std::vector<std::int32_t> cu;
  GatedDeltaRuleInputs in;
  Tensor dout, d_final;
};

std::int64_t sequences(const Problem& p) {
  return static_cast<std::int64_t>(p.cu.size()) - 1;
}

Shape state_shape(const Problem& p) {
  return Shape{sequences(p), p.value_heads, p.key_dim, p.value_dim};
}

// Rows of x [T, H, d] scaled to unit L2 norm (the model's q / k after l2norm).
void normalise_rows(const Tensor& x) {
  const std::int64_t d = x.shape().last();
  for (std::int64_t r = 0; r < x.numel() / d; ++r) {
    double sum = 0;
    for (std::int64_t j = 0; j < d; ++j) sum += element(x, r * d + j) * element(x, r * d + j);
    for (std::int64_t j = 0; j < d; ++j)
      set_element(x, r * d + j, element(x, r * d + j) / std::sqrt(sum + 1e-6));
  }
}

Problem make_problem(std::vector<std::int32_t> cu, std::int64_t key_heads, std::int64_t value_heads,
                     std::int64_t key_dim, std::int64_t value_dim, DType dtype,
                     bool with_initial_state, std::uint64_t seed = 0) {
  Problem p;
  p.cu = std::move(cu);
  p.tokens = p.cu.back();
  p.key_heads = key_heads;
  p.value_heads = value_heads;
  p.key_dim = key_dim;
  p.value_dim = value_dim;
  const std::uint64_t base = 100 + 20 * seed;
  p.in.q = random_tensor(Shape{p.tokens, key_heads, key_dim}, dtype, base + 1);
  p.in.k = random_tensor(Shape{p.tokens, key_heads, key_dim}, dtype, base + 2);
  normalise_rows(p.in.q);
  normalise_rows(p.in.k);
  p.in.v = random_tensor(Shape{p.tokens, value_heads, value_dim}, dtype, base + 3);
  // g = −(0.02 + 0.4 |n|) <= 0 (decays between ~0.3 and ~1), beta = σ(n) ∈ (0, 1).
  p.in.g = random_tensor(Shape{p.tokens, value_heads}, dtype, base + 4);
  p.in.beta = random_tensor(Shape{p.tokens, value_heads}, dtype, base + 5);
  for (std::int64_t i = 0; i < p.in.g.numel(); ++i) {
    set_element(p.in.g, i, -(0.02 + 0.4 * std::abs(element(p.in.g, i))));
    set_element(p.in.beta, i, 1.0 / (1.0 + std::exp(-element(p.in.beta, i))));
  }
  p.in.cu_seqlens = int_tensor(p.cu);
  if (with_initial_state) p.in.initial_state = random_tensor(state_shape(p), dtype, base + 6, 0.5);
  p.dout = random_tensor(Shape{p.tokens, value_heads, value_dim}, dtype, base + 7);
  p.d_final = random_tensor(state_shape(p), dtype, base + 8);
  return p;
}

struct Result {
  Tensor out, final_state;
  GatedDeltaRuleGrads grads;
};

Result allocate_result(const Problem& p, DType dtype) {
  Result r;
  r.out = Tensor::empty(Shape{p.tokens, p.value_heads, p.value_dim}, dtype);
  r.final_state = Tensor::empty(state_shape(p), dtype);
  r.grads.dq = Tensor::empty(p.in.q.shape(), dtype);
  r.grads.dk = Tensor::empty(p.in.k.shape(), dtype);
  r.grads.dv = Tensor::empty(p.in.v.shape(), dtype);
  r.grads.dg = Tensor::empty(p.in.g.shape(), dtype);
  r.grads.dbeta = Tensor::empty(p.in.beta.shape(), dtype);
  r.grads.d_initial_state = Tensor::empty(state_shape(p), dtype);
  return r;
}

enum class Form { recurrent, chunked_saved, chunked_recomputed };

Result run(const Problem& p, Form form, int chunk_size, bool with_d_final = true) {
  core::Arena arena("test");
  const OpContext ctx{core::Device::cpu, &arena};
  const DType dtype = p.in.q.dtype();
  Result r = allocate_result(p, dtype);
  const GatedDeltaRuleParams params{1.0 / std::sqrt(static_cast<double>(p.key_dim)), chunk_size};
  const Tensor d_final = with_d_final ? p.d_final : Tensor();
  if (form == Form::recurrent) {
    gated_delta_rule_recurrent_forward(ctx, p.in, params, r.out, r.final_state);
    gated_delta_rule_recurrent_backward(ctx, p.dout, d_final, p.in, params, r.grads);
  } else {
    GatedDeltaRuleSaved saved;
    if (form == Form::chunked_saved) {
      saved.chunk_states =
          Tensor::empty(Shape{gated_delta_rule_num_chunks(p.in.cu_seqlens, chunk_size),
                              p.value_heads, p.key_dim, p.value_dim},
                        dtype);
    }
    gated_delta_rule_chunked_forward(ctx, p.in, params, r.out, r.final_state, saved);
    gated_delta_rule_chunked_backward(ctx, p.dout, d_final, p.in, params, saved, r.grads);
  }
  return r;
}

void require_same(const Result& a, const Result& b, double tolerance) {
  CHECK(relative_error(a.out, b.out) < tolerance);
  CHECK(relative_error(a.final_state, b.final_state) < tolerance);
  CHECK(relative_error(a.grads.dq, b.grads.dq) < tolerance);
  CHECK(relative_error(a.grads.dk, b.grads.dk) < tolerance);
  CHECK(relative_error(a.grads.dv, b.grads.dv) < tolerance);
  CHECK(relative_error(a.grads.dg, b.grads.dg) < tolerance);
  CHECK(relative_error(a.grads.dbeta, b.grads.dbeta) < tolerance);
  CHECK(relative_error(a.grads.d_initial_state, b.grads.d_initial_state) < tolerance);
}

}  // namespace

TEST_CASE("gated delta rule: recurrent backward matches finite differences for every input",
          "[ops][gdn][fd]") {
  const bool with_initial_state = GENERATE(false, true);
  // Two key heads, four value heads (two per key head), an empty sequence in the middle.
  const Problem p = make_problem({0, 5, 5, 9}, 2, 4, 3, 2, DType::f64, with_initial_state);
  const Result r = run(p, Form::recurrent, 1);
  core::Arena arena("fd");
  const OpContext ctx{core::Device::cpu, &arena};
  const GatedDeltaRuleParams params{1.0 / std::sqrt(3.0), 1};
  const Tensor out = Tensor::empty(r.out.shape(), DType::f64);
  const Tensor final_state = Tensor::empty(r.final_state.shape(), DType::f64);
  auto loss = [&] {
    gated_delta_rule_recurrent_forward(ctx, p.in, params, out, final_state);
    return dot(out, p.dout) + dot(final_state, p.d_final);
  };
  CHECK(finite_difference_error(p.in.q, r.grads.dq, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.k, r.grads.dk, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.v, r.grads.dv, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.g, r.grads.dg, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.beta, r.grads.dbeta, loss) < kFdTolerance);
  if (with_initial_state) {
    CHECK(finite_difference_error(p.in.initial_state, r.grads.d_initial_state, loss) <
          kFdTolerance);
  }
}

TEST_CASE("gated delta rule: chunked equals recurrent (forward, gradients, states)", "[ops][gdn]") {
  const int chunk_size = GENERATE(1, 3, 4, 16, 64);
  const bool with_initial_state = GENERATE(false, true);
  // Lengths 7, 0, 13, 20: partial last chunks for every chunk size above, one exact multiple
  // of 4, and sequences shorter than a chunk.
  const Problem p = make_problem({0, 7, 7, 20, 40}, 2, 4, 5, 3, DType::f64, with_initial_state);
  const Result reference = run(p, Form::recurrent, chunk_size);
  require_same(run(p, Form::chunked_saved, chunk_size), reference, 1e-12);
  require_same(run(p, Form::chunked_recomputed, chunk_size), reference, 1e-12);
  // Without a final-state gradient too.
  require_same(run(p, Form::chunked_recomputed, chunk_size, false),
               run(p, Form::recurrent, chunk_size, false), 1e-12);
}

TEST_CASE("gated delta rule: chunked backward matches finite differences", "[ops][gdn][fd]") {
  const Problem p = make_problem({0, 6, 11}, 1, 2, 4, 3, DType::f64, true, 1);
  const int chunk_size = 4;
  const Result r = run(p, Form::chunked_recomputed, chunk_size);
  core::Arena arena("fd");
  const OpContext ctx{core::Device::cpu, &arena};
  const GatedDeltaRuleParams params{0.5, chunk_size};
  const Tensor out = Tensor::empty(r.out.shape(), DType::f64);
  const Tensor final_state = Tensor::empty(r.final_state.shape(), DType::f64);
  GatedDeltaRuleSaved none;
  auto loss = [&] {
    gated_delta_rule_chunked_forward(ctx, p.in, params, out, final_state, none);
    return dot(out, p.dout) + dot(final_state, p.d_final);
  };
  CHECK(finite_difference_error(p.in.q, r.grads.dq, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.k, r.grads.dk, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.v, r.grads.dv, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.g, r.grads.dg, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.beta, r.grads.dbeta, loss) < kFdTolerance);
  CHECK(finite_difference_error(p.in.initial_state, r.grads.d_initial_state, loss) < kFdTolerance);
}

TEST_CASE("gated delta rule: a packed bin equals each sequence run alone (state reset)",
          "[ops][gdn]") {
  const Problem packed = make_problem({0, 9, 12, 30}, 2, 2, 4, 4, DType::f64, false, 2);
  const Result together = run(packed, Form::chunked_recomputed, 4);
  for (std::size_t s = 0; s + 1 < packed.cu.size(); ++s) {
    const std::int64_t begin = packed.cu[s], end = packed.cu[s + 1];
    Problem alone = packed;
    alone.cu = {0, static_cast<std::int32_t>(end - begin)};
    alone.tokens = end - begin;
    alone.in.cu_seqlens = int_tensor(alone.cu);
    alone.in.q = packed.in.q.slice(begin, end);
    alone.in.k = packed.in.k.slice(begin, end);
    alone.in.v = packed.in.v.slice(begin, end);
    alone.in.g = packed.in.g.slice(begin, end);
    alone.in.beta = packed.in.beta.slice(begin, end);
    alone.dout = packed.dout.slice(begin, end);
    alone.d_final =
        packed.d_final.slice(static_cast<std::int64_t>(s), static_cast<std::int64_t>(s) + 1);
    const Result single = run(alone, Form::chunked_recomputed, 4);
    require_close(single.out, together.out.slice(begin, end), 1e-13, 1e-13, "out");
    require_close(single.grads.dq, together.grads.dq.slice(begin, end), 1e-13, 1e-13, "dq");
    require_close(single.grads.dg, together.grads.dg.slice(begin, end), 1e-13, 1e-13, "dg");
    require_close(
        single.final_state,
        together.final_state.slice(static_cast<std::int64_t>(s), static_cast<std::int64_t>(s) + 1),
        1e-13, 1e-13, "final_state");
  }
}

TEST_CASE("gated delta rule: value heads share key heads like repeat_interleave", "[ops][gdn]") {
  // Hk = 2, Hv = 4 against Hk = Hv = 4 with every key head repeated twice (heads 0,0,1,1).
  const Problem shared = make_problem({0, 10, 17}, 2, 4, 3, 2, DType::f64, true, 3);
  Problem repeated = shared;
  repeated.key_heads = 4;
  repeated.in.q = Tensor::empty(Shape{shared.tokens, 4, 3}, DType::f64);
  repeated.in.k = Tensor::empty(Shape{shared.tokens, 4, 3}, DType::f64);
  for (std::int64_t t = 0; t < shared.tokens; ++t) {
    for (std::int64_t h = 0; h < 4; ++h) {
      for (std::int64_t i = 0; i < 3; ++i) {
        set_element(repeated.in.q, (t * 4 + h) * 3 + i,
                    element(shared.in.q, (t * 2 + h / 2) * 3 + i));
        set_element(repeated.in.k, (t * 4 + h) * 3 + i,
                    element(shared.in.k, (t * 2 + h / 2) * 3 + i));
      }
    }
  }
  const Result a = run(shared, Form::chunked_saved, 4);
  const Result b = run(repeated, Form::chunked_saved, 4);
  require_close(a.out, b.out, 1e-13, 1e-13, "out");
  require_close(a.grads.dv, b.grads.dv, 1e-13, 1e-13, "dv");
  // dq of a shared key head = sum over its value heads.
  for (std::int64_t t = 0; t < shared.tokens; ++t) {
    for (std::int64_t h = 0; h < 2; ++h) {
      for (std::int64_t i = 0; i < 3; ++i) {
        const double summed = element(b.grads.dq, (t * 4 + 2 * h) * 3 + i) +
                              element(b.grads.dq, (t * 4 + 2 * h + 1) * 3 + i);
        CHECK(element(a.grads.dq, (t * 2 + h) * 3 + i) == Approx(summed).margin(1e-13));
      }
    }
  }
}

TEST_CASE("gated delta rule: a sequence split in two continues through the state hand-over",
          "[ops][gdn]") {
  // Context parallelism: part 1 runs from zero and hands its final state to part 2; backward
  // hands d_initial_state of part 2 back as d_final_state of part 1.
  const Problem whole = make_problem({0, 23}, 1, 2, 4, 3, DType::f64, false, 4);
  const std::int64_t split = 10;
  auto part = [&](std::int64_t begin, std::int64_t end) {
    Problem p = whole;
    p.cu = {0, static_cast<std::int32_t>(end - begin)};
    p.tokens = end - begin;
    p.in.cu_seqlens = int_tensor(p.cu);
    p.in.q = whole.in.q.slice(begin, end);
    p.in.k = whole.in.k.slice(begin, end);
    p.in.v = whole.in.v.slice(begin, end);
    p.in.g = whole.in.g.slice(begin, end);
    p.in.beta = whole.in.beta.slice(begin, end);
    p.dout = whole.dout.slice(begin, end);
    return p;
  };
  Problem second = part(split, whole.tokens);
  Problem first = part(0, split);
  core::Arena arena("cp");
  const OpContext ctx{core::Device::cpu, &arena};
  const GatedDeltaRuleParams params{0.5, 4};
  Result r1 = allocate_result(first, DType::f64), r2 = allocate_result(second, DType::f64);
  GatedDeltaRuleSaved none;
  gated_delta_rule_chunked_forward(ctx, first.in, params, r1.out, r1.final_state, none);
  second.in.initial_state = r1.final_state;
  gated_delta_rule_chunked_forward(ctx, second.in, params, r2.out, r2.final_state, none);
  gated_delta_rule_chunked_backward(ctx, second.dout, Tensor(), second.in, params, none, r2.grads);
  gated_delta_rule_chunked_backward(ctx, first.dout, r2.grads.d_initial_state, first.in, params,
                                    none, r1.grads);
  const GatedDeltaRuleParams whole_params{0.5, 1};
  Result full = allocate_result(whole, DType::f64);
  gated_delta_rule_recurrent_forward(ctx, whole.in, whole_params, full.out, full.final_state);
  gated_delta_rule_recurrent_backward(ctx, whole.dout, Tensor(), whole.in, whole_params,
                                      full.grads);
  require_close(r1.out, full.out.slice(0, split), 1e-12, 1e-13, "out part 1");
  require_close(r2.out, full.out.slice(split, whole.tokens), 1e-12, 1e-13, "out part 2");
  require_close(r2.final_state, full.final_state, 1e-12, 1e-13, "final state");
  require_close(r1.grads.dk, full.grads.dk.slice(0, split), 1e-12, 1e-13, "dk part 1");
  require_close(r1.grads.dg, full.grads.dg.slice(0, split), 1e-12, 1e-13, "dg part 1");
  require_close(r2.grads.dk, full.grads.dk.slice(split, whole.tokens), 1e-12, 1e-13, "dk part 2");
}

TEST_CASE("gated delta rule: the final state is affine in the initial state (P from v = 0)",
          "[ops][gdn]") {
  // final(S0) = P S0 + final(0), with P = final state of the same keys/gates for v = 0 started
  // from the identity (dv = dk): the map a context-parallel prefix combine composes.
  const std::int64_t dk = 3, dv = 2;
  const Problem p = make_problem({0, 11}, 1, 1, dk, dv, DType::f64, true, 5);
  core::Arena arena("affine");
  const OpContext ctx{core::Device::cpu, &arena};
  const GatedDeltaRuleParams params{0.5, 4};
  GatedDeltaRuleSaved none;
  const Tensor out = Tensor::empty(Shape{p.tokens, 1, dv}, DType::f64);
  const Tensor with_state = Tensor::empty(Shape{1, 1, dk, dv}, DType::f64);
  const Tensor from_zero = Tensor::empty(Shape{1, 1, dk, dv}, DType::f64);
  gated_delta_rule_chunked_forward(ctx, p.in, params, out, with_state, none);
  GatedDeltaRuleInputs zero_in = p.in;
  zero_in.initial_state = Tensor();
  gated_delta_rule_chunked_forward(ctx, zero_in, params, out, from_zero, none);
  GatedDeltaRuleInputs map_in = p.in;
  map_in.v = Tensor::zeros(Shape{p.tokens, 1, dk}, DType::f64);
  map_in.initial_state = Tensor::zeros(Shape{1, 1, dk, dk}, DType::f64);
  for (std::int64_t i = 0; i < dk; ++i) set_element(map_in.initial_state, i * dk + i, 1.0);
  const Tensor map = Tensor::empty(Shape{1, 1, dk, dk}, DType::f64);
  const Tensor map_out = Tensor::empty(Shape{p.tokens, 1, dk}, DType::f64);
  gated_delta_rule_chunked_forward(ctx, map_in, params, map_out, map, none);
  for (std::int64_t i = 0; i < dk; ++i) {
    for (std::int64_t j = 0; j < dv; ++j) {
      double expected = element(from_zero, i * dv + j);
      for (std::int64_t l = 0; l < dk; ++l)
        expected += element(map, i * dk + l) * element(p.in.initial_state, l * dv + j);
      CHECK(element(with_state, i * dv + j) == Approx(expected).margin(1e-13));
    }
  }
}

TEST_CASE("gated delta rule: f32 agrees with f64", "[ops][gdn]") {
  const Problem p64 = make_problem({0, 70, 150}, 2, 4, 16, 8, DType::f64, true, 6);
  Problem p32 = p64;
  auto to_f32 = [](const Tensor& t) {
    const Tensor f = Tensor::empty(t.shape(), DType::f32);
    for (std::int64_t i = 0; i < t.numel(); ++i) set_element(f, i, element(t, i));
    return f;
  };
  p32.in.q = to_f32(p64.in.q);
  p32.in.k = to_f32(p64.in.k);
  p32.in.v = to_f32(p64.in.v);
  p32.in.g = to_f32(p64.in.g);
  p32.in.beta = to_f32(p64.in.beta);
  p32.in.initial_state = to_f32(p64.in.initial_state);
  p32.dout = to_f32(p64.dout);
  p32.d_final = to_f32(p64.d_final);
  // Measured: <= 6e-7 norm-wise for every tensor, both forms.
  const Result a = run(p32, Form::chunked_saved, 64), b = run(p64, Form::chunked_saved, 64);
  require_same(a, b, 5e-6);
  require_same(run(p32, Form::recurrent, 1), b, 5e-6);
}

TEST_CASE("gated delta rule: strong decay (exp(γ) underflows in f32) stays finite and exact",
          "[ops][gdn]") {
  // The models' g = −exp(A_log)·softplus(·) reaches −50 per token; over a chunk of 64 the
  // cumulative decay exp(γ) underflows to 0 in f32. The chunked form only ever evaluates
  // exp(γ_t − γ_s) for s <= t (<= 1) and exp(γ) (<= 1), so nothing overflows.
  const Problem base = make_problem({0, 100, 170}, 1, 2, 8, 4, DType::f64, true, 7);
  Problem p = base;
  auto to_f32 = [](const Tensor& t) {
    const Tensor f = Tensor::empty(t.shape(), DType::f32);
    for (std::int64_t i = 0; i < t.numel(); ++i) set_element(f, i, element(t, i));
    return f;
  };
  p.in.q = to_f32(base.in.q);
  p.in.k = to_f32(base.in.k);
  p.in.v = to_f32(base.in.v);
  p.in.g = to_f32(base.in.g);
  for (std::int64_t i = 0; i < p.in.g.numel(); ++i)
    set_element(p.in.g, i, i % 3 == 0 ? -50.0 : 30 * element(base.in.g, i));
  p.in.beta = to_f32(base.in.beta);
  p.in.initial_state = to_f32(base.in.initial_state);
  p.dout = to_f32(base.dout);
  p.d_final = to_f32(base.d_final);
  const Result chunked = run(p, Form::chunked_recomputed, 64);
  const Result recurrent = run(p, Form::recurrent, 64);
  for (const Tensor* t : {&chunked.out, &chunked.grads.dq, &chunked.grads.dk, &chunked.grads.dg,
                          &chunked.grads.dbeta, &chunked.grads.d_initial_state}) {
    for (std::int64_t i = 0; i < t->numel(); ++i) REQUIRE(std::isfinite(element(*t, i)));
  }
  // Both f32 forms against the f64 recurrence on the same (f32-representable) inputs.
  Problem exact = p;
  auto to_f64 = [](const Tensor& t) {
    const Tensor f = Tensor::empty(t.shape(), DType::f64);
    for (std::int64_t i = 0; i < t.numel(); ++i) set_element(f, i, element(t, i));
    return f;
  };
  for (Tensor* t : {&exact.in.q, &exact.in.k, &exact.in.v, &exact.in.g, &exact.in.beta,
                    &exact.in.initial_state, &exact.dout, &exact.d_final})
    *t = to_f64(*t);
  const Result reference = run(exact, Form::recurrent, 64);
  for (const Result* r : {&chunked, &recurrent}) {
    INFO((r == &chunked ? "chunked" : "recurrent"));
    CHECK(relative_error(r->out, reference.out) < 1e-5);
    CHECK(relative_error(r->grads.dq, reference.grads.dq) < 1e-5);
    CHECK(relative_error(r->grads.dk, reference.grads.dk) < 1e-5);
    CHECK(relative_error(r->grads.dv, reference.grads.dv) < 1e-5);
    // dg of the chunked form: 3e-5 measured (dγ sums terms of both signs: every Γ_ts factor
    // adds to γ_t and subtracts from γ_s); the recurrent form: 1e-6.
    CHECK(relative_error(r->grads.dg, reference.grads.dg) < 1e-4);
    CHECK(relative_error(r->grads.dbeta, reference.grads.dbeta) < 1e-5);
    CHECK(relative_error(r->grads.d_initial_state, reference.grads.d_initial_state) < 1e-5);
  }
}

TEST_CASE("gated delta rule: bad arguments are rejected naming the op and the argument",
          "[ops][gdn]") {
  const Problem p = make_problem({0, 4}, 2, 4, 3, 2, DType::f64, false);
  core::Arena arena("errors");
  const OpContext ctx{core::Device::cpu, &arena};
  GatedDeltaRuleSaved none;
  const Tensor out = Tensor::empty(Shape{4, 4, 2}, DType::f64);
  GatedDeltaRuleInputs bad = p.in;
  bad.v = Tensor::empty(Shape{4, 3, 2}, DType::f64);  // 3 value heads for 2 key heads
  CHECK_THROWS_WITH(gated_delta_rule_chunked_forward(ctx, bad, {}, out, Tensor(), none),
                    Catch::Contains("gated_delta_rule_chunked_forward") &&
                        Catch::Contains("multiple of the key heads"));
  bad = p.in;
  bad.cu_seqlens = int_tensor({0, 3});
  CHECK_THROWS_WITH(gated_delta_rule_recurrent_forward(ctx, bad, {}, out, Tensor()),
                    Catch::Contains("cu_seqlens"));
  CHECK_THROWS_WITH(gated_delta_rule_chunked_forward(ctx, p.in, {1.0, 0}, out, Tensor(), none),
                    Catch::Contains("chunk_size"));
  const OpContext no_scratch{};
  CHECK_THROWS_WITH(gated_delta_rule_recurrent_forward(no_scratch, p.in, {}, out, Tensor()),
                    Catch::Contains("scratch"));
  GatedDeltaRuleSaved wrong{Tensor::empty(Shape{2, 4, 3, 2}, DType::f64)};
  CHECK_THROWS_WITH(gated_delta_rule_chunked_forward(ctx, p.in, {1.0, 4}, out, Tensor(), wrong),
                    Catch::Contains("saved.chunk_states"));
}

}  // namespace dyncp::ops::test
