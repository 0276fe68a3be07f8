#include "core/tensor.hpp"

#include <cstdlib>
#include <cstring>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace dyncp::core {

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  if (dims.size() > static_cast<std::size_t>(kMaxTensorDims)) {
    throw_runtime_error("Shape: rank " + std::to_string(dims.size()) + " exceeds the maximum " +
                        std::to_string(kMaxTensorDims));
  }
  for (std::int64_t dim : dims) push_back(dim);
}

void Shape::push_back(std::int64_t dim) {
  if (rank_ >= kMaxTensorDims) {
    throw_runtime_error("Shape: rank exceeds the maximum " + std::to_string(kMaxTensorDims));
  }
  if (dim < 0) throw_runtime_error("Shape: negative dim " + std::to_string(dim));
  dims_[static_cast<std::size_t>(rank_++)] = dim;
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

std::int64_t Shape::row_numel() const {
  std::int64_t n = 1;
  for (int i = 1; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[static_cast<std::size_t>(i)] != other.dims_[static_cast<std::size_t>(i)])
      return false;
  }
  return true;
}

std::string Shape::to_string() const {
  std::string text = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(dims_[static_cast<std::size_t>(i)]);
  }
  return text + "]";
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.dtype_ = dtype;
  tensor.device_ = device;
  tensor.defined_ = true;
  // Round up so aligned_alloc's size is a multiple of the alignment; at least one line.
  const std::size_t bytes = (tensor.nbytes() + 63) / 64 * 64 + 64;
  if (device == Device::cuda) {
    DeviceMemory& memory = device_memory();
    void* pointer = memory.allocate(bytes);
    tensor.owner_ = std::shared_ptr<void>(pointer, [&memory](void* p) { memory.release(p); });
    tensor.data_ = pointer;
    return tensor;
  }
  void* memory = std::aligned_alloc(64, bytes);
  if (memory == nullptr) {
    throw_runtime_error("Tensor::empty: out of memory allocating " + std::to_string(bytes) +
                        " bytes for " + tensor.describe());
  }
  tensor.owner_ = std::shared_ptr<void>(memory, [](void* p) { std::free(p); });
  tensor.data_ = memory;
  return tensor;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor tensor = empty(shape, dtype, device);
  tensor.fill_zero();
  return tensor;
}

Tensor Tensor::view_of(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.dtype_ = dtype;
  tensor.device_ = device;
  tensor.data_ = data;
  tensor.defined_ = true;
  return tensor;
}

std::int64_t Tensor::size(int dim) const {
  const int resolved = dim < 0 ? dim + rank() : dim;
  if (resolved < 0 || resolved >= rank()) {
    throw_runtime_error("Tensor::size: dim " + std::to_string(dim) + " out of range for " +
                        describe());
  }
  return shape_[resolved];
}

void Tensor::check_dtype(DType expected) const {
  if (!defined_) throw_runtime_error("Tensor: access to an undefined tensor");
  if (dtype_ != expected) {
    throw_runtime_error("Tensor: element type " + std::string(dtype_name(expected)) +
                        " requested from " + describe());
  }
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > shape_[0]) {
    throw_runtime_error("Tensor::slice: rows [" + std::to_string(begin) + ", " +
                        std::to_string(end) + ") out of range for " + describe());
  }
  Tensor view = *this;
  view.shape_[0] = end - begin;
  view.data_ = static_cast<std::byte*>(data_) +
               static_cast<std::size_t>(begin * shape_.row_numel()) * dtype_size(dtype_);
  return view;
}

Tensor Tensor::select(std::int64_t index) const {
  if (rank() == 0 || index < 0 || index >= shape_[0]) {
    throw_runtime_error("Tensor::select: index " + std::to_string(index) + " out of range for " +
                        describe());
  }
  Tensor view = *this;
  Shape reduced;
  for (int i = 1; i < rank(); ++i) reduced.push_back(shape_[i]);
  view.shape_ = reduced;
  view.data_ = static_cast<std::byte*>(data_) +
               static_cast<std::size_t>(index * shape_.row_numel()) * dtype_size(dtype_);
  return view;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape.numel() != numel()) {
    throw_runtime_error("Tensor::reshape: cannot view " + describe() + " as " + shape.to_string());
  }
  Tensor view = *this;
  view.shape_ = shape;
  return view;
}

Tensor Tensor::as_matrix() const {
  const std::int64_t cols = shape_.last();
  const std::int64_t rows = cols == 0 ? 0 : numel() / cols;
  Tensor view = *this;
  view.shape_ = Shape{rows, cols};
  return view;
}

void Tensor::fill_zero() const {
  if (nbytes() == 0) return;
  if (device_ == Device::cuda) {
    device_memory().set_zero(data_, nbytes());
  } else {
    std::memset(data_, 0, nbytes());
  }
}

void Tensor::copy_from(const Tensor& src) const {
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    throw_runtime_error("Tensor::copy_from: " + src.describe() + " into " + describe());
  }
  if (nbytes() == 0) return;
  if (device_ == Device::cpu && src.device_ == Device::cpu) {
    std::memmove(data_, src.data_, nbytes());
    return;
  }
  device_memory().copy(data_, device_, src.data_, src.device_, nbytes());
  if (device_ != src.device_) {
    auto& counter = device_ == Device::cuda ? device_traffic().host_to_device_bytes
                                            : device_traffic().device_to_host_bytes;
    counter += nbytes();
  }
}

std::string Tensor::describe() const {
  if (!defined_) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_.to_string() + " " +
         std::string(device_name(device_));
}

}  // namespace dyncp::core
