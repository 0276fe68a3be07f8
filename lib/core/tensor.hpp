#pragma once
// Tensor: a dense, row-major (C order) block of elements with a shape of up to kMaxTensorDims
// dims, a dtype and a device. It either owns its storage (shared, reference counted: copies of
// a Tensor alias the same memory) or is a view into memory owned elsewhere (an Arena block, a
// memory-mapped checkpoint, another Tensor). Tensors have no strides: every view is contiguous,
// which is why only the leading dim can be sliced.
//
// Copying a Tensor never allocates (a view copies a pointer; an owning tensor bumps a reference
// count), so Tensors can be passed by value inside the step loop.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "core/dtype.hpp"

namespace dyncp::core {

enum class Device : std::uint8_t { cpu, cuda };

constexpr std::string_view device_name(Device device) {
  return device == Device::cpu ? "cpu" : "cuda";
}

inline constexpr int kMaxTensorDims = 5;

// A shape of rank 0..kMaxTensorDims. Rank 0 is a scalar (numel 1).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int dim) const { return dims_[static_cast<std::size_t>(dim)]; }
  std::int64_t& operator[](int dim) { return dims_[static_cast<std::size_t>(dim)]; }
  std::int64_t numel() const;
  // Elements per index of the leading dim (numel / dims[0]; 1 for rank 0 or 1).
  std::int64_t row_numel() const;
  // Size of the last dim (1 for a scalar).
  std::int64_t last() const { return rank_ == 0 ? 1 : dims_[static_cast<std::size_t>(rank_ - 1)]; }
  void push_back(std::int64_t dim);

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  // "[3, 4, 5]"
  std::string to_string() const;

 private:
  std::array<std::int64_t, kMaxTensorDims> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  // An undefined tensor (defined() == false); used for optional arguments.
  Tensor() = default;

  // Owning tensor, uninitialised, 64-byte aligned. Heap allocation: never call in the step loop
  // (use an Arena). Device::cuda storage comes from the installed CUDA backend
  // (core/device_memory.hpp); its elements are not readable from host code.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu);
  // Non-owning view over `data`; the caller keeps the memory alive while the view is used.
  static Tensor view_of(void* data, const Shape& shape, DType dtype, Device device = Device::cpu);

  bool defined() const { return defined_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  std::int64_t size(int dim) const;  // checked; negative dims count from the end
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // True when this tensor does not keep its storage alive (arena / external memory).
  bool is_view() const { return owner_ == nullptr; }
  bool is_contiguous() const { return true; }

  // Typed access; throws (runtime error naming both dtypes) when T does not match dtype().
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<T>::value);
    return static_cast<T*>(data_);
  }
  void* raw_data() const { return data_; }
  // bf16 has no C++ element type here: read it as raw 16-bit words.
  std::uint16_t* bf16_bits() const {
    check_dtype(DType::bf16);
    return static_cast<std::uint16_t*>(data_);
  }

  // Views sharing this tensor's storage (and keeping an owning tensor's storage alive).
  // slice: rows [begin, end) of the leading dim.
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  // select: row `index` of the leading dim, rank reduced by one.
  Tensor select(std::int64_t index) const;
  // reshape: same numel, new shape (every dim explicit).
  Tensor reshape(const Shape& shape) const;
  // As a matrix [numel / last, last] (useful to hand [T, H, d] to a 2-D op).
  Tensor as_matrix() const;

  // Whole-tensor operations for setup and tests (not for hot loops); on either device.
  void fill_zero() const;
  // Copies values from `src` (same shape and dtype, any pair of devices; synchronous).
  void copy_from(const Tensor& src) const;

  // "f32[3, 4] cpu" for error messages.
  std::string describe() const;

 private:
  void check_dtype(DType expected) const;

  std::shared_ptr<void> owner_;  // null for views
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  bool defined_ = false;
};

}  // namespace dyncp::core
