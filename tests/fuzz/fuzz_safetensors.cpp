// libFuzzer target for the safetensors header parser: any byte string must either parse into a
// header whose every tensor lies inside the data buffer, or throw core::Error; never crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/error.hpp"
#include "model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto header =
        dyncp::model::parse_safetensors_header(std::span<const std::uint8_t>(data, size), "fuzz");
    for (const auto& tensor : header.tensors) {
      // Properties the parser promises; a violation is a parser bug, so crash loudly.
      if (tensor.data_end > header.data_bytes || tensor.data_begin > tensor.data_end) std::abort();
      if (static_cast<std::uint64_t>(tensor.num_elements()) *
              dyncp::model::stored_dtype_size(tensor.dtype) !=
          tensor.data_end - tensor.data_begin)
        std::abort();
      if (dyncp::model::is_float_dtype(tensor.dtype) && tensor.num_elements() > 0 &&
          tensor.num_elements() < 4096) {
        float values[4096];
        const std::uint8_t* base = data + 8 + header.header_bytes + tensor.data_begin;
        dyncp::model::convert_to_f32(tensor.dtype, base,
                                     static_cast<std::size_t>(tensor.num_elements()), values);
      }
    }
  } catch (const dyncp::core::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
