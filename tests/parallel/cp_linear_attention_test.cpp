// Context parallelism of the Gated DeltaNet's sequence-level part, both implementations: on
// every group the world splits into (whole world, pairs, single ranks), each rank holding
// zigzag chunks r and 2c-1-r of every sequence, the CP context gives exactly this rank's rows
// of what the one-rank context computes on the whole sequences (out, dq/dk/dv before the conv,
// dg, dbeta) for two layers in a row, and the group's conv weight gradients sum to the
// one-rank gradient. The state-passing context must also run the recurrence on its own rows
// only. Sequence lengths mix several recurrence chunks, sequences of 2c rows for c = 4 and for
// the group's own c (segments of one row, shorter than the conv window: halos reach over
// several earlier segments) and an empty one.
#include "parallel/cp_linear_attention.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/arena.hpp"
#include "core/rng.hpp"
#include "dist/comm.hpp"
#include "model/local_seams.hpp"
#include "mpi_test_world.hpp"
#include "parallel/cp_linear_attention_states.hpp"

namespace dyncp::parallel {
namespace {

using core::DType;
using core::Tensor;

constexpr std::int64_t kKeyHeads = 2, kKeyDim = 4, kValueHeads = 4, kValueDim = 4, kKernel = 4;
constexpr std::int64_t kConvChannels = 2 * kKeyHeads * kKeyDim + kValueHeads * kValueDim;

model::LinearAttentionDims dims() {
  model::LinearAttentionDims d;
  d.key_heads = kKeyHeads;
  d.key_head_dim = kKeyDim;
  d.value_heads = kValueHeads;
  d.value_head_dim = kValueDim;
  d.chunk_size = 4;  // several chunks per sequence, a partial last one
  return d;
}

// One sequence-level input of the layer, for every row of the whole bin.
struct Whole {
  Tensor q, k, v, g, beta, dout;
};

// Deterministic values per (sequence, position): every rank builds the same whole bin.
Whole make_whole(std::int64_t rows) {
  Whole w{Tensor::zeros({rows, kKeyHeads, kKeyDim}, DType::f32),
          Tensor::zeros({rows, kKeyHeads, kKeyDim}, DType::f32),
          Tensor::zeros({rows, kValueHeads, kValueDim}, DType::f32),
          Tensor::zeros({rows, kValueHeads}, DType::f32),
          Tensor::zeros({rows, kValueHeads}, DType::f32),
          Tensor::zeros({rows, kValueHeads, kValueDim}, DType::f32)};
  core::Rng rng(7, core::RngPurpose::test);
  for (const Tensor* t : {&w.q, &w.k, &w.v, &w.dout}) {
    for (std::int64_t i = 0; i < t->numel(); ++i)
      t->data<float>()[i] = static_cast<float>(rng.uniform() * 2 - 1);
  }
  for (std::int64_t i = 0; i < w.g.numel(); ++i) {
    w.g.data<float>()[i] = static_cast<float>(-0.5 * rng.uniform());  // log decay < 0
    w.beta.data<float>()[i] = static_cast<float>(0.1 + 0.8 * rng.uniform());
  }
  return w;
}

// Rows of `whole` (bin order) at the given whole-row indices.
Tensor pick_rows(const Tensor& whole, const std::vector<std::int64_t>& rows) {
  core::Shape shape = whole.shape();
  shape[0] = static_cast<std::int64_t>(rows.size());
  Tensor picked = Tensor::zeros(shape, whole.dtype());
  const std::int64_t width = whole.shape().row_numel();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::int64_t j = 0; j < width; ++j)
      picked.data<float>()[static_cast<std::int64_t>(i) * width + j] =
          whole.data<float>()[rows[i] * width + j];
  }
  return picked;
}

double relative_difference(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

struct Outputs {
  Tensor out, dq, dk, dv, dg, dbeta, dconv;
};

// Forward of every layer in order, then backward in reverse (as the model runs a bin).
std::vector<Outputs> run(model::LinearAttentionContext& context_impl, const Whole& in,
                         const model::LocalBinLayout& layout,
                         const std::vector<Tensor>& conv_weights) {
  core::Arena activations("activations", 1 << 20);
  core::Arena scratch("scratch", 1 << 20);
  model::SeamContext context{{}, &activations, &scratch};
  context.ops.scratch = &scratch;
  std::vector<Outputs> o;
  for (const Tensor& conv_weight : conv_weights) {
    o.push_back({Tensor::zeros(in.v.shape(), DType::f32), Tensor::zeros(in.q.shape(), DType::f32),
                 Tensor::zeros(in.k.shape(), DType::f32), Tensor::zeros(in.v.shape(), DType::f32),
                 Tensor::zeros(in.g.shape(), DType::f32),
                 Tensor::zeros(in.beta.shape(), DType::f32),
                 Tensor::zeros(conv_weight.shape(), DType::f32)});
  }
  context_impl.begin_bin(context, layout);
  std::vector<model::LinearAttentionSaved> saved(conv_weights.size());
  for (std::size_t l = 0; l < conv_weights.size(); ++l) {
    context_impl.forward(context, static_cast<int>(l), dims(), in.q, in.k, in.v, conv_weights[l],
                         in.g, in.beta, o[l].out, saved[l]);
  }
  for (std::size_t l = conv_weights.size(); l-- > 0;) {
    context_impl.backward(context, static_cast<int>(l), dims(), in.dout, in.q, in.k, in.v,
                          conv_weights[l], in.g, in.beta, saved[l], o[l].dq, o[l].dk, o[l].dv,
                          o[l].dconv, o[l].dg, o[l].dbeta);
  }
  return o;
}

template <typename Context>
void check_group(dist::Comm& group, const std::vector<std::int32_t>& lengths, double tolerance) {
  const int c = group.size();
  // The whole bin (one rank's view) and this rank's zigzag rows of it.
  std::vector<std::int32_t> whole_cu{0}, whole_positions, cu{0}, positions;
  std::vector<std::int64_t> own_rows;
  for (const std::int32_t length : lengths) {
    REQUIRE(length % (2 * c) == 0);
    const std::int32_t first = whole_cu.back();
    for (std::int32_t p = 0; p < length; ++p) whole_positions.push_back(p);
    const std::int32_t chunk = length / (2 * c);
    for (const int k : {group.rank(), 2 * c - 1 - group.rank()}) {
      for (std::int32_t p = k * chunk; p < (k + 1) * chunk; ++p) {
        positions.push_back(p);
        own_rows.push_back(first + p);
      }
    }
    whole_cu.push_back(first + length);
    cu.push_back(static_cast<std::int32_t>(positions.size()));
  }
  const auto whole_rows = static_cast<std::int64_t>(whole_positions.size());
  const auto local_rows = static_cast<std::int64_t>(positions.size());
  const Whole whole = make_whole(whole_rows);
  // Two layers with different conv weights: the context keeps per-layer state for backward.
  std::vector<Tensor> conv_weights;
  core::Rng rng(11, core::RngPurpose::test);
  for (int layer = 0; layer < 2; ++layer) {
    conv_weights.push_back(Tensor::zeros({kConvChannels, kKernel}, DType::f32));
    for (std::int64_t i = 0; i < conv_weights.back().numel(); ++i)
      conv_weights.back().data<float>()[i] = static_cast<float>(rng.uniform() - 0.5);
  }

  model::LocalLinearAttentionContext local;
  const std::vector<Outputs> reference = run(
      local, whole,
      {Tensor::view_of(whole_cu.data(), {static_cast<std::int64_t>(whole_cu.size())}, DType::i32),
       Tensor::view_of(whole_positions.data(), {whole_rows}, DType::i32)},
      conv_weights);

  const Whole mine{pick_rows(whole.q, own_rows),    pick_rows(whole.k, own_rows),
                   pick_rows(whole.v, own_rows),    pick_rows(whole.g, own_rows),
                   pick_rows(whole.beta, own_rows), pick_rows(whole.dout, own_rows)};
  Context cp;
  cp.set_group(&group);
  const std::vector<Outputs> actual =
      run(cp, mine,
          {Tensor::view_of(cu.data(), {static_cast<std::int64_t>(cu.size())}, DType::i32),
           Tensor::view_of(positions.data(), {local_rows}, DType::i32)},
          conv_weights);

  INFO("group '" << group.name() << "' of " << c << ", rank " << group.rank());
  if constexpr (std::is_same_v<Context, CpStatePassingLinearAttentionContext>) {
    // The work is divided: this rank ran the recurrence on its own rows, once per layer.
    CHECK(cp.recurrence_rows() == (c > 1 ? 2 * local_rows : 0));
  }
  for (std::size_t l = 0; l < actual.size(); ++l) {
    INFO("layer " << l);
    const Outputs& a = actual[l];
    const Outputs& r = reference[l];
    group.all_reduce(
        std::span<float>(a.dconv.data<float>(), static_cast<std::size_t>(a.dconv.numel())),
        dist::ReduceOp::sum);
    CHECK(relative_difference(a.out, pick_rows(r.out, own_rows)) <= tolerance);
    CHECK(relative_difference(a.dq, pick_rows(r.dq, own_rows)) <= tolerance);
    CHECK(relative_difference(a.dk, pick_rows(r.dk, own_rows)) <= tolerance);
    CHECK(relative_difference(a.dv, pick_rows(r.dv, own_rows)) <= tolerance);
    CHECK(relative_difference(a.dg, pick_rows(r.dg, own_rows)) <= tolerance);
    CHECK(relative_difference(a.dbeta, pick_rows(r.dbeta, own_rows)) <= tolerance);
    // Each rank adds its own rows' part: the sum over the group is the one-rank gradient.
    CHECK(relative_difference(a.dconv, r.dconv) <= tolerance);
  }
}

// Multiples of 2c for c = 4: every group can shard them; plus one of exactly 2c rows for the
// group at hand (one row per zigzag chunk).
std::vector<std::int32_t> mixed_lengths(const dist::Comm& group) {
  return {40, 8, 0, 24, 2 * group.size(), 64};
}

template <typename Context>
void check_every_group(double tolerance) {
  dist::Comm& world = dist::testing::test_world();
  const auto pairs = world.split(world.rank() / 2, world.rank(), "pair");
  const auto singles = world.split(world.rank(), 0, "single");
  check_group<Context>(world, mixed_lengths(world), tolerance);
  if (world.size() % 2 == 0) check_group<Context>(*pairs, mixed_lengths(*pairs), tolerance);
  check_group<Context>(*singles, mixed_lengths(*singles), tolerance);
}

// Every rank claims the first chunk: positions repeat and others are missing.
template <typename Context>
void check_rejects_missing_position() {
  dist::Comm& world = dist::testing::test_world();
  if (world.size() == 1) return;
  std::vector<std::int32_t> cu{0, 2}, positions{0, 1};
  core::Arena activations("activations", 1 << 16);
  core::Arena scratch("scratch", 1 << 16);
  Context cp;
  cp.set_group(&world);
  REQUIRE_THROWS_WITH(cp.begin_bin({{}, &activations, &scratch},
                                   {Tensor::view_of(cu.data(), {2}, DType::i32),
                                    Tensor::view_of(positions.data(), {2}, DType::i32)}),
                      Catch::Contains("exactly once"));
}

TEST_CASE("Whole-sequence DeltaNet context equals one rank on every group", "[cp_linear]") {
  // The same whole-sequence arithmetic as one rank: round-off only from the gathers' order.
  check_every_group<CpLinearAttentionContext>(1e-6);
}

TEST_CASE("State-passing DeltaNet context equals one rank on every group", "[cp_linear]") {
  // Chunks restart at each segment: the same function, another order of operations.
  check_every_group<CpStatePassingLinearAttentionContext>(1e-5);
}

TEST_CASE("Both DeltaNet contexts reject a group whose shards miss a position", "[cp_linear]") {
  check_rejects_missing_position<CpLinearAttentionContext>();
  check_rejects_missing_position<CpStatePassingLinearAttentionContext>();
}

}  // namespace
}  // namespace dyncp::parallel
