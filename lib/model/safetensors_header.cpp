// Header parsing and dtype conversion for safetensors; no file access here so that the parser
// can be fuzzed on raw bytes.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/json_text_check.hpp"
#include "model/safetensors.hpp"

namespace dyncp::model {

namespace {

using nlohmann::json;

struct DTypeEntry {
  StoredDType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeEntry dtype_table[] = {
    {StoredDType::f64, "F64", 8},         {StoredDType::f32, "F32", 4},
    {StoredDType::f16, "F16", 2},         {StoredDType::bf16, "BF16", 2},
    {StoredDType::i64, "I64", 8},         {StoredDType::i32, "I32", 4},
    {StoredDType::i16, "I16", 2},         {StoredDType::i8, "I8", 1},
    {StoredDType::u8, "U8", 1},           {StoredDType::boolean, "BOOL", 1},
    {StoredDType::f8_e4m3, "F8_E4M3", 1}, {StoredDType::f8_e5m2, "F8_E5M2", 1},
};

const DTypeEntry& entry_of(StoredDType dtype) {
  for (const auto& entry : dtype_table)
    if (entry.dtype == dtype) return entry;
  DYNCP_CHECK(false, "dtype missing from the table");
}

// Largest header we accept; real checkpoints with thousands of tensors stay far below this.
constexpr std::uint64_t max_header_bytes = 100u << 20;

std::string tensor_where(const std::string& file, const std::string& tensor) {
  return file + ": tensor '" + tensor + "'";
}

std::uint64_t read_u64_le(const std::uint8_t* bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

StoredTensorInfo parse_entry(const std::string& name, const json& entry, std::uint64_t data_bytes,
                             const std::string& file) {
  const std::string where = tensor_where(file, name);
  if (!entry.is_object()) core::throw_data_error(where, "header entry is not a JSON object");
  StoredTensorInfo info;
  info.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string())
    core::throw_data_error(where, "header entry has no string 'dtype'");
  const std::string dtype_name = dtype_it->get<std::string>();
  const auto known = std::find_if(std::begin(dtype_table), std::end(dtype_table),
                                  [&](const DTypeEntry& e) { return dtype_name == e.name; });
  if (known == std::end(dtype_table))
    core::throw_data_error(where, "unknown dtype '" + dtype_name +
                                      "' (expected one of F64, F32, F16, BF16, I64, I32, I16, I8, "
                                      "U8, BOOL, F8_E4M3, F8_E5M2)");
  info.dtype = known->dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array())
    core::throw_data_error(where, "header entry has no 'shape' array");
  std::uint64_t num_elements = 1;
  for (const auto& dim : *shape_it) {
    if (!dim.is_number_unsigned())
      core::throw_data_error(where, "shape entry " + dim.dump() + " is not a non-negative integer");
    const auto extent = dim.get<std::uint64_t>();
    if (extent > static_cast<std::uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(num_elements, extent, &num_elements))
      core::throw_data_error(where, "shape " + shape_it->dump() + " overflows");
    info.shape.push_back(static_cast<std::int64_t>(extent));
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
    core::throw_data_error(where, "'data_offsets' must be [begin, end] with non-negative integers");
  info.data_begin = (*offsets_it)[0].get<std::uint64_t>();
  info.data_end = (*offsets_it)[1].get<std::uint64_t>();
  if (info.data_begin > info.data_end)
    core::throw_data_error(where, "data_offsets " + offsets_it->dump() + " end before they begin");
  if (info.data_end > data_bytes)
    core::throw_data_error(where, "data_offsets " + offsets_it->dump() +
                                      " reach past the data buffer of " +
                                      std::to_string(data_bytes) + " bytes (file truncated?)");
  std::uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(num_elements, known->size, &expected_bytes) ||
      expected_bytes != info.data_end - info.data_begin)
    core::throw_data_error(where, "shape " + shape_it->dump() + " of " + dtype_name + " needs " +
                                      std::to_string(num_elements) + " x " +
                                      std::to_string(known->size) + " bytes but data_offsets " +
                                      offsets_it->dump() + " hold " +
                                      std::to_string(info.data_end - info.data_begin));
  return info;
}

float f16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    out = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else {  // subnormal: renormalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    out = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof value);
  return value;
}

}  // namespace

std::size_t stored_dtype_size(StoredDType dtype) {
  return entry_of(dtype).size;
}
const char* stored_dtype_name(StoredDType dtype) {
  return entry_of(dtype).name;
}
bool is_float_dtype(StoredDType dtype) {
  return dtype == StoredDType::f64 || dtype == StoredDType::f32 || dtype == StoredDType::f16 ||
         dtype == StoredDType::bf16;
}

std::int64_t StoredTensorInfo::num_elements() const {
  std::int64_t count = 1;
  for (const auto extent : shape) count *= extent;
  return count;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> bytes,
                                           const std::string& file_name) {
  if (bytes.size() < 8)
    core::throw_data_error(file_name,
                           "truncated safetensors file: " + std::to_string(bytes.size()) +
                               " bytes, shorter than the 8-byte header length");
  SafetensorsHeader header;
  header.header_bytes = read_u64_le(bytes.data());
  if (header.header_bytes > max_header_bytes || header.header_bytes > bytes.size() - 8)
    core::throw_data_error(file_name, "header length " + std::to_string(header.header_bytes) +
                                          " exceeds the file size " + std::to_string(bytes.size()) +
                                          " (truncated or corrupt)");
  header.data_bytes = bytes.size() - 8 - header.header_bytes;
  const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
  core::check_json_text(std::string_view(text, header.header_bytes), file_name + " header");
  const json root = json::parse(text, text + header.header_bytes, nullptr, false);
  if (root.is_discarded()) core::throw_data_error(file_name, "header is not valid JSON");
  if (!root.is_object()) core::throw_data_error(file_name, "header is not a JSON object");

  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        core::throw_data_error(file_name, "'__metadata__' is not an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          core::throw_data_error(file_name, "'__metadata__." + key + "' is not a string");
        header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parse_entry(name, entry, header.data_bytes, file_name));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const StoredTensorInfo& a, const StoredTensorInfo& b) {
              return a.data_begin != b.data_begin ? a.data_begin < b.data_begin
                                                  : a.data_end < b.data_end;
            });
  // Two non-empty tensors must never share bytes: a header claiming so is corrupt.
  const StoredTensorInfo* previous = nullptr;
  for (const auto& tensor : header.tensors) {
    if (tensor.data_begin == tensor.data_end) continue;
    if (previous != nullptr && tensor.data_begin < previous->data_end)
      core::throw_data_error(tensor_where(file_name, tensor.name),
                             "data_offsets overlap those of tensor '" + previous->name + "'");
    previous = &tensor;
  }
  return header;
}

void convert_to_f32(StoredDType dtype, const std::uint8_t* source, std::size_t count, float* out) {
  switch (dtype) {
    case StoredDType::f32:
      std::memcpy(out, source, count * sizeof(float));
      return;
    case StoredDType::f64:
      for (std::size_t i = 0; i < count; ++i) {
        double value;
        std::memcpy(&value, source + 8 * i, sizeof value);
        out[i] = static_cast<float>(value);
      }
      return;
    case StoredDType::bf16:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, source + 2 * i, sizeof bits);
        out[i] = core::bf16_bits_to_float(bits);
      }
      return;
    case StoredDType::f16:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, source + 2 * i, sizeof bits);
        out[i] = f16_bits_to_float(bits);
      }
      return;
    default:
      DYNCP_CHECK(false, std::string("convert_to_f32 called with ") + stored_dtype_name(dtype));
  }
}

}  // namespace dyncp::model
