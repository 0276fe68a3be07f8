#pragma once
// Entry-point checks shared by the ops (internal to lib/ops): every failure names the op, the
// argument and its shape / dtype / device, and throws a core::Error (runtime kind: a mismatch
// between layers is a bug in the caller, not bad user input).

#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "ops/context.hpp"
#include "ops/vocab_shard.hpp"

namespace dyncp::ops {
class DeviceOps;
}

namespace dyncp::ops::detail {

[[noreturn]] inline void fail(std::string_view op, const std::string& message) {
  core::throw_runtime_error(std::string(op) + ": " + message);
}

inline void require_defined(std::string_view op, std::string_view name, const Tensor& t) {
  if (!t.defined()) fail(op, std::string(name) + " is undefined");
}

inline void require_dtype(std::string_view op, std::string_view name, const Tensor& t,
                          DType dtype) {
  require_defined(op, name, t);
  if (t.dtype() != dtype) {
    fail(op, std::string(name) + " must be " + std::string(core::dtype_name(dtype)) + ", got " +
                 t.describe());
  }
}

inline void require_shape(std::string_view op, std::string_view name, const Tensor& t,
                          const Shape& shape) {
  require_defined(op, name, t);
  if (t.shape() != shape) {
    fail(op, std::string(name) + " must have shape " + shape.to_string() + ", got " + t.describe());
  }
}

inline void require_rank(std::string_view op, std::string_view name, const Tensor& t, int rank) {
  require_defined(op, name, t);
  if (t.rank() != rank) {
    fail(op,
         std::string(name) + " must have rank " + std::to_string(rank) + ", got " + t.describe());
  }
}

// f32 or f64 on cpu, f32 on cuda; every later float argument must match the first one.
inline void require_float(std::string_view op, std::string_view name, const Tensor& t) {
  require_defined(op, name, t);
  if (t.device() == Device::cuda ? t.dtype() != DType::f32
                                 : t.dtype() != DType::f32 && t.dtype() != DType::f64) {
    fail(op, std::string(name) + " must be f32 or f64 on cpu (f32 on cuda), got " + t.describe());
  }
}

inline void require_device(std::string_view op, const OpContext& ctx, std::string_view name,
                           const Tensor& t) {
  if (t.defined() && t.device() != ctx.device) {
    fail(op, std::string(name) + " is on " + std::string(core::device_name(t.device())) +
                 " but the op runs on " + std::string(core::device_name(ctx.device)) + ": " +
                 t.describe());
  }
}

// For ops with no CUDA implementation yet: a CUDA context is refused, never run on the host.
inline void require_cpu_context(std::string_view op, const OpContext& ctx) {
  if (ctx.device != Device::cpu) {
    fail(op, "no " + std::string(core::device_name(ctx.device)) +
                 " implementation yet (CPU only; docs/cuda.md lists what runs on the GPU)");
  }
}

inline core::Arena& require_scratch(std::string_view op, const OpContext& ctx) {
  if (ctx.scratch == nullptr) fail(op, "needs ctx.scratch (an Arena for temporary memory)");
  return *ctx.scratch;
}

// Every defined tensor in `args`: float (require_float), on the context's device, one shared
// dtype.
inline void require_float_operands_on_any_device(
    std::string_view op, const OpContext& ctx,
    std::initializer_list<std::pair<std::string_view, const Tensor*>> args) {
  const Tensor* first = nullptr;
  for (const auto& [name, tensor] : args) {
    if (!tensor->defined()) continue;
    require_float(op, name, *tensor);
    require_device(op, ctx, name, *tensor);
    if (first == nullptr) {
      first = tensor;
    } else if (tensor->dtype() != first->dtype()) {
      fail(op, "all float operands must share one dtype; got " + first->describe() + " and " +
                   std::string(name) + " " + tensor->describe());
    }
  }
}

// The same for ops that exist on the CPU only.
inline void require_float_operands(
    std::string_view op, const OpContext& ctx,
    std::initializer_list<std::pair<std::string_view, const Tensor*>> args) {
  require_cpu_context(op, ctx);
  require_float_operands_on_any_device(op, ctx, args);
}

// A vocabulary shard with `rows` table rows must be a non-empty part of the vocabulary:
// 0 <= first and first + rows <= vocab_size.
inline void require_vocab_shard(std::string_view op, const VocabShardRange& shard,
                                std::int64_t rows) {
  if (rows < 1 || shard.first < 0 || shard.first + rows > shard.vocab_size) {
    fail(op, "the vocabulary shard of " + std::to_string(rows) + " rows from id " +
                 std::to_string(shard.first) + " must be a non-empty part of the vocabulary [0, " +
                 std::to_string(shard.vocab_size) + ")");
  }
}

// The CUDA backend of a CUDA context (ops/device_ops.hpp); throws when the binary has none.
DeviceOps& device_ops(std::string_view op);

// Calls body(float{}) or body(double{}) by dtype.
template <typename Body>
void dispatch_float(std::string_view op, DType dtype, Body&& body) {
  if (dtype == DType::f32) {
    body(float{});
  } else if (dtype == DType::f64) {
    body(double{});
  } else {
    fail(op, "unsupported dtype " + std::string(core::dtype_name(dtype)) + " on cpu");
  }
}

}  // namespace dyncp::ops::detail
