// Context parallelism of the Gated DeltaNet's sequence-level part: on every group the world
// splits into (whole world, pairs, single ranks), each rank holding zigzag chunks r and 2c-1-r
// of every sequence, the CP context gives exactly this rank's rows of what the one-rank
// context computes on the whole sequences (out, dq/dk/dv before the conv, dg, dbeta), and the
// group's conv weight gradients sum to the one-rank gradient. Sequence lengths mix several
// recurrence chunks, a sequence of exactly 2c rows (one row per zigzag chunk, shorter than the
// conv window) and an empty one.
#include "parallel/cp_linear_attention.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/arena.hpp"
#include "core/rng.hpp"
#include "dist/comm.hpp"
#include "model/local_seams.hpp"
#include "mpi_test_world.hpp"

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

Outputs run(model::LinearAttentionContext& context_impl, const Whole& in,
            const model::LocalBinLayout& layout, const Tensor& conv_weight) {
  core::Arena activations("activations", 1 << 20);
  core::Arena scratch("scratch", 1 << 20);
  model::SeamContext context{{}, &activations, &scratch};
  context.ops.scratch = &scratch;
  Outputs o{
      Tensor::zeros(in.v.shape(), DType::f32),       Tensor::zeros(in.q.shape(), DType::f32),
      Tensor::zeros(in.k.shape(), DType::f32),       Tensor::zeros(in.v.shape(), DType::f32),
      Tensor::zeros(in.g.shape(), DType::f32),       Tensor::zeros(in.beta.shape(), DType::f32),
      Tensor::zeros(conv_weight.shape(), DType::f32)};
  context_impl.begin_bin(context, layout);
  model::LinearAttentionSaved saved;
  context_impl.forward(context, 0, dims(), in.q, in.k, in.v, conv_weight, in.g, in.beta, o.out,
                       saved);
  context_impl.backward(context, 0, dims(), in.dout, in.q, in.k, in.v, conv_weight, in.g, in.beta,
                        saved, o.dq, o.dk, o.dv, o.dconv, o.dg, o.dbeta);
  return o;
}

void check_group(dist::Comm& group, const std::vector<std::int32_t>& lengths) {
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
  Tensor conv_weight = Tensor::zeros({kConvChannels, kKernel}, DType::f32);
  core::Rng rng(11, core::RngPurpose::test);
  for (std::int64_t i = 0; i < conv_weight.numel(); ++i)
    conv_weight.data<float>()[i] = static_cast<float>(rng.uniform() - 0.5);

  model::LocalLinearAttentionContext local;
  const Outputs reference = run(
      local, whole,
      {Tensor::view_of(whole_cu.data(), {static_cast<std::int64_t>(whole_cu.size())}, DType::i32),
       Tensor::view_of(whole_positions.data(), {whole_rows}, DType::i32)},
      conv_weight);

  const Whole mine{pick_rows(whole.q, own_rows),    pick_rows(whole.k, own_rows),
                   pick_rows(whole.v, own_rows),    pick_rows(whole.g, own_rows),
                   pick_rows(whole.beta, own_rows), pick_rows(whole.dout, own_rows)};
  CpLinearAttentionContext cp;
  cp.set_group(&group);
  const Outputs actual =
      run(cp, mine,
          {Tensor::view_of(cu.data(), {static_cast<std::int64_t>(cu.size())}, DType::i32),
           Tensor::view_of(positions.data(), {local_rows}, DType::i32)},
          conv_weight);
  group.all_reduce(
      std::span<float>(actual.dconv.data<float>(), static_cast<std::size_t>(actual.dconv.numel())),
      dist::ReduceOp::sum);

  INFO("group '" << group.name() << "' of " << c << ", rank " << group.rank());
  CHECK(relative_difference(actual.out, pick_rows(reference.out, own_rows)) <= 1e-6);
  CHECK(relative_difference(actual.dq, pick_rows(reference.dq, own_rows)) <= 1e-6);
  CHECK(relative_difference(actual.dk, pick_rows(reference.dk, own_rows)) <= 1e-6);
  CHECK(relative_difference(actual.dv, pick_rows(reference.dv, own_rows)) <= 1e-6);
  CHECK(relative_difference(actual.dg, pick_rows(reference.dg, own_rows)) <= 1e-6);
  CHECK(relative_difference(actual.dbeta, pick_rows(reference.dbeta, own_rows)) <= 1e-6);
  // Summed over the group, the weight gradient is the one-rank gradient, counted once.
  CHECK(relative_difference(actual.dconv, reference.dconv) <= 1e-6);
}

TEST_CASE("CP DeltaNet context equals whole-sequence DeltaNet on every group", "[cp_linear]") {
  dist::Comm& world = dist::testing::test_world();
  const auto pairs = world.split(world.rank() / 2, world.rank(), "pair");
  const auto singles = world.split(world.rank(), 0, "single");
  // Multiples of 2c for c = 4: every group can shard them.
  const std::vector<std::int32_t> lengths{40, 8, 0, 24, 64};
  check_group(world, lengths);
  if (world.size() % 2 == 0) check_group(*pairs, lengths);
  check_group(*singles, lengths);
}

TEST_CASE("CP DeltaNet context rejects a group whose shards miss a position", "[cp_linear]") {
  dist::Comm& world = dist::testing::test_world();
  if (world.size() == 1) return;
  // Every rank claims the first chunk: positions repeat and others are missing.
  std::vector<std::int32_t> cu{0, 2}, positions{0, 1};
  core::Arena activations("activations", 1 << 16);
  core::Arena scratch("scratch", 1 << 16);
  CpLinearAttentionContext cp;
  cp.set_group(&world);
  REQUIRE_THROWS_WITH(cp.begin_bin({{}, &activations, &scratch},
                                   {Tensor::view_of(cu.data(), {2}, DType::i32),
                                    Tensor::view_of(positions.data(), {2}, DType::i32)}),
                      Catch::Contains("exactly once"));
}

}  // namespace
}  // namespace dyncp::parallel
