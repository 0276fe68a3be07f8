#include "core/tensor.hpp"

#include <catch2/catch.hpp>

#include "core/error.hpp"

using dyncp::core::DType;
using dyncp::core::Shape;
using dyncp::core::Tensor;

TEST_CASE("Shape reports rank, numel and text", "[core][tensor]") {
  const Shape shape{3, 4, 5};
  CHECK(shape.rank() == 3);
  CHECK(shape.numel() == 60);
  CHECK(shape.row_numel() == 20);
  CHECK(shape.last() == 5);
  CHECK(shape.to_string() == "[3, 4, 5]");
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{0, 7}.numel() == 0);
  CHECK_THROWS_AS((Shape{1, 2, 3, 4, 5, 6}), dyncp::core::Error);
}

TEST_CASE("owning tensors alias on copy and views share storage", "[core][tensor]") {
  Tensor a = Tensor::zeros(Shape{4, 3}, DType::f32);
  CHECK(a.defined());
  CHECK_FALSE(a.is_view());
  Tensor b = a;  // same storage
  b.data<float>()[5] = 2.5F;
  CHECK(a.data<float>()[5] == 2.5F);

  Tensor rows = a.slice(1, 3);
  CHECK(rows.shape() == Shape{2, 3});
  CHECK(rows.data<float>()[2] == 2.5F);  // element [1, 2] of a
  Tensor row = a.select(1);
  CHECK(row.shape() == Shape{3});
  CHECK(row.data<float>()[2] == 2.5F);
  CHECK(a.reshape(Shape{2, 6}).data<float>()[5] == 2.5F);
  CHECK(a.reshape(Shape{3, 2, 2}).as_matrix().shape() == Shape{6, 2});
}

TEST_CASE("typed access checks the dtype and ranges are checked", "[core][tensor]") {
  Tensor a = Tensor::zeros(Shape{2, 2}, DType::f64);
  CHECK_THROWS_WITH(a.data<float>(), Catch::Contains("f32") && Catch::Contains("f64[2, 2]"));
  CHECK_THROWS_AS(a.slice(1, 3), dyncp::core::Error);
  CHECK_THROWS_AS(a.select(2), dyncp::core::Error);
  CHECK_THROWS_AS(a.reshape(Shape{3}), dyncp::core::Error);
  CHECK_THROWS_AS(a.size(2), dyncp::core::Error);
  CHECK(a.size(-1) == 2);
  CHECK(Tensor().describe() == "undefined");
  CHECK_FALSE(Tensor().defined());
}

TEST_CASE("views over external memory do not own it", "[core][tensor]") {
  float storage[6] = {0, 1, 2, 3, 4, 5};
  Tensor v = Tensor::view_of(storage, Shape{2, 3}, DType::f32);
  CHECK(v.is_view());
  CHECK(v.slice(1, 2).data<float>()[0] == 3.0F);
  Tensor copy = Tensor::empty(Shape{2, 3}, DType::f32);
  copy.copy_from(v);
  CHECK(copy.data<float>()[4] == 4.0F);
  CHECK(reinterpret_cast<std::uintptr_t>(copy.raw_data()) % 64 == 0);
}
