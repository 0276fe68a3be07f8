// The all-to-all exchange's head rule (config/head_sharding.hpp) and its head reordering
// (parallel/head_blocks.hpp), without ranks: which heads each rank of a group gets, that a
// rank's query heads always use its K/V heads, and that packing then unpacking restores a
// tensor (copy), or sums a replicated head's copies.

#include "parallel/head_blocks.hpp"

#include <catch2/catch.hpp>
#include <vector>

#include "config/head_sharding.hpp"
#include "core/tensor.hpp"

using namespace dyncp;
using Catch::Contains;

TEST_CASE("head sharding: query heads split, K/V heads split or replicated", "[parallel]") {
  // Qwen3-30B-A3B: 32 query heads, 4 K/V heads.
  for (const std::int64_t ranks : {1, 2, 4, 8, 16, 32}) {
    INFO("ranks " << ranks);
    REQUIRE(config::head_sharding_problem(32, 4, ranks).empty());
    const config::HeadSharding sharding{ranks, 32, 4};
    CHECK(sharding.query_heads_per_rank() * ranks == 32);
    CHECK(sharding.kv_heads_per_rank() * ranks == 4 * sharding.kv_replicas());
    for (std::int64_t r = 0; r < ranks; ++r) {
      // Every query head of rank r uses a K/V head rank r holds (query head h: K/V h / 8).
      for (std::int64_t h = sharding.first_query_head(r);
           h < sharding.first_query_head(r) + sharding.query_heads_per_rank(); ++h) {
        const std::int64_t kv = h / 8;
        CHECK(kv >= sharding.first_kv_head(r));
        CHECK(kv < sharding.first_kv_head(r) + sharding.kv_heads_per_rank());
      }
    }
  }
  CHECK(config::HeadSharding{8, 32, 4}.kv_replicas() == 2);
  CHECK(config::HeadSharding{32, 32, 4}.kv_replicas() == 8);
  CHECK_THAT(config::head_sharding_problem(32, 4, 64),
             Contains("32 query heads") && Contains("group of 64 ranks"));
  CHECK_THAT(config::head_sharding_problem(12, 6, 4), Contains("K/V heads must divide"));
  CHECK_THAT(config::head_sharding_problem(6, 3, 2), Contains("K/V heads must divide"));
  CHECK(config::head_sharding_problem(6, 3, 3).empty());
}

TEST_CASE("head blocks: pack then unpack restores the tensor", "[parallel]") {
  // [T = 3, H = 4, w = 2], two blocks of two heads.
  core::Tensor local = core::Tensor::empty({3, 4, 2}, core::DType::f32);
  float* x = local.data<float>();
  for (int i = 0; i < 24; ++i) x[i] = static_cast<float>(i);
  const std::vector<std::int64_t> first = {0, 2};
  core::Tensor blocks = core::Tensor::empty({2 * 3, 2, 2}, core::DType::f32);
  parallel::pack_head_blocks(ops::OpContext{}, local, first, 2, blocks);
  const float* b = blocks.data<float>();
  // Block 1, row 0 holds heads 2-3 of row 0: elements 4..7.
  CHECK(b[12] == 4.0f);
  CHECK(b[15] == 7.0f);
  // Block 0, row 2 holds heads 0-1 of row 2: elements 16..19.
  CHECK(b[8] == 16.0f);
  core::Tensor back = core::Tensor::zeros({3, 4, 2}, core::DType::f32);
  parallel::unpack_head_blocks(ops::OpContext{}, blocks, first, 2, back, /*sum_repeated=*/false);
  for (int i = 0; i < 24; ++i) CHECK(back.data<float>()[i] == x[i]);
}

TEST_CASE("head blocks: replicated heads are summed on the way back", "[parallel]") {
  // [T = 2, H = 2, w = 1] over 4 ranks: head 0 on ranks 0-1, head 1 on ranks 2-3.
  core::Tensor local = core::Tensor::empty({2, 2}, core::DType::f64);
  const std::vector<std::int64_t> first = {0, 0, 1, 1};
  core::Tensor blocks = core::Tensor::empty({4 * 2, 1}, core::DType::f64);
  double* b = blocks.data<double>();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<double>(1 << i);
  parallel::unpack_head_blocks(ops::OpContext{}, blocks, first, 1, local, /*sum_repeated=*/true);
  const double* y = local.data<double>();
  CHECK(y[0] == 1.0 + 4.0);     // row 0, head 0: blocks 0 and 1
  CHECK(y[1] == 16.0 + 64.0);   // row 0, head 1: blocks 2 and 3
  CHECK(y[2] == 2.0 + 8.0);     // row 1, head 0
  CHECK(y[3] == 32.0 + 128.0);  // row 1, head 1
  // Packing sends each replica its own copy.
  parallel::pack_head_blocks(ops::OpContext{}, local, first, 1, blocks);
  CHECK(blocks.data<double>()[0] == y[0]);
  CHECK(blocks.data<double>()[2] == y[0]);
  CHECK(blocks.data<double>()[7] == y[3]);
}
