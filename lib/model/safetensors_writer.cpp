// Writing safetensors files and sharded folders.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/output_file.hpp"
#include "model/safetensors.hpp"

namespace dyncp::model {

namespace {

std::uint16_t float_to_f16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u)  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs_bits > 0x7f800000u ? 0x200u : 0u));
  if (abs_bits >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  if (abs_bits < 0x38800000u) {  // subnormal half (or zero): round to nearest even
    float magnitude;
    std::memcpy(&magnitude, &abs_bits, sizeof magnitude);
    const float scaled = magnitude * 16777216.0f;  // 2^24: one half-subnormal ulp = 1
    auto rounded = static_cast<std::uint32_t>(scaled);
    const float remainder = scaled - static_cast<float>(rounded);
    if (remainder > 0.5f || (remainder == 0.5f && (rounded & 1u))) ++rounded;
    return static_cast<std::uint16_t>(sign | rounded);
  }
  const std::uint32_t rebased = abs_bits - (112u << 23);
  const std::uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13));
}

}  // namespace

void encode_safetensors_values(std::vector<std::uint8_t>& buffer, std::span<const float> values,
                               StoredDType dtype) {
  buffer.resize(values.size() * stored_dtype_size(dtype));
  std::uint8_t* out = buffer.data();
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case StoredDType::f32:
        std::memcpy(out + 4 * i, &values[i], 4);
        break;
      case StoredDType::bf16: {
        const std::uint16_t bits = core::float_to_bf16_bits(values[i]);
        std::memcpy(out + 2 * i, &bits, 2);
        break;
      }
      case StoredDType::f16: {
        const std::uint16_t bits = float_to_f16_bits(values[i]);
        std::memcpy(out + 2 * i, &bits, 2);
        break;
      }
      default:
        DYNCP_CHECK(false, "unsupported write dtype");
    }
  }
}

namespace {

std::uint64_t stored_bytes(const TensorToWrite& tensor, StoredDType dtype) {
  return static_cast<std::uint64_t>(tensor.numel()) * stored_dtype_size(dtype);
}

void require_writable_dtype(StoredDType dtype) {
  if (dtype != StoredDType::f32 && dtype != StoredDType::bf16 && dtype != StoredDType::f16)
    core::throw_usage_error(std::string("cannot write safetensors as ") + stored_dtype_name(dtype) +
                            " (expected F32, BF16 or F16)");
}

// The length prefix and the header of a file holding `tensors` in order, padded with spaces so
// the data buffer starts 8-byte aligned; `data_offsets` receives each tensor's offset in the
// data buffer.
std::string file_head(std::span<const TensorToWrite> tensors, StoredDType dtype,
                      std::vector<std::uint64_t>& data_offsets) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t offset = 0;
  data_offsets.clear();
  for (const auto& tensor : tensors) {
    DYNCP_CHECK(tensor.fill || tensor.values.empty() ||
                    tensor.numel() == static_cast<std::int64_t>(tensor.values.size()),
                "shape and value count differ for " + tensor.name);
    const std::uint64_t bytes = stored_bytes(tensor, dtype);
    header[tensor.name] = {{"dtype", stored_dtype_name(dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    data_offsets.push_back(offset);
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - (8 + header_text.size()) % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>(header_text.size() >> (8 * i));
  return head + header_text;
}

std::string shard_name(std::size_t k, std::size_t count) {
  if (count == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, count);
  return name;
}

}  // namespace

std::int64_t TensorToWrite::numel() const {
  std::int64_t count = 1;
  for (const auto extent : shape) count *= extent;
  return count;
}

void write_safetensors_file(const std::string& path, std::span<const TensorToWrite> tensors,
                            StoredDType dtype) {
  require_writable_dtype(dtype);
  for (const auto& tensor : tensors) {
    DYNCP_CHECK(tensor.fill || tensor.numel() == static_cast<std::int64_t>(tensor.values.size()),
                "shape and value count differ for " + tensor.name);
  }
  std::vector<std::uint64_t> data_offsets;
  const std::string head = file_head(tensors, dtype, data_offsets);

  // Write to a temporary name and rename, so a crash never leaves a half-written file under
  // the final name; a failed write (full disk, file-size limit) removes the partial file.
  // One tensor at a time: memory beyond the caller's is one tensor's values and bytes.
  core::write_file_replacing(path, [&](core::OutputFile& out) {
    out.write(head);
    std::vector<float> produced;
    std::vector<std::uint8_t> bytes;
    for (const auto& tensor : tensors) {
      std::span<const float> values = tensor.values;
      if (tensor.fill) {
        produced.resize(static_cast<std::size_t>(tensor.numel()));
        tensor.fill(produced);
        values = produced;
      }
      encode_safetensors_values(bytes, values, dtype);
      out.write(bytes.data(), bytes.size());
    }
  });
}

std::vector<SafetensorsFilePlan> plan_safetensors_folder(std::span<const TensorToWrite> tensors,
                                                         StoredDType dtype,
                                                         std::uint64_t max_shard_bytes) {
  require_writable_dtype(dtype);
  // Greedy split in the given order: a shard closes when the next tensor would overflow it.
  std::vector<SafetensorsFilePlan> files(1);
  std::uint64_t shard_bytes = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::uint64_t bytes = stored_bytes(tensors[i], dtype);
    if (max_shard_bytes > 0 && files.back().end > files.back().first &&
        shard_bytes + bytes > max_shard_bytes) {
      files.push_back({});
      files.back().first = files.back().end = i;
      shard_bytes = 0;
    }
    files.back().end = i + 1;
    shard_bytes += bytes;
  }
  for (std::size_t k = 0; k < files.size(); ++k) {
    SafetensorsFilePlan& file = files[k];
    file.name = shard_name(k, files.size());
    file.head = file_head(tensors.subspan(file.first, file.end - file.first), dtype, file.offsets);
    file.bytes = file.head.size();
    for (std::size_t i = file.first; i < file.end; ++i)
      file.bytes += stored_bytes(tensors[i], dtype);
    for (auto& offset : file.offsets) offset += file.head.size();
  }
  return files;
}

std::string safetensors_index_json(std::span<const TensorToWrite> tensors,
                                   std::span<const SafetensorsFilePlan> files, StoredDType dtype) {
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::uint64_t total_bytes = 0;
  for (const auto& file : files) {
    for (std::size_t i = file.first; i < file.end; ++i) {
      weight_map[tensors[i].name] = file.name;
      total_bytes += stored_bytes(tensors[i], dtype);
    }
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total_bytes}};
  index["weight_map"] = weight_map;
  return index.dump(2) + "\n";
}

std::vector<std::string> write_safetensors_folder(const std::string& folder,
                                                  std::span<const TensorToWrite> tensors,
                                                  StoredDType dtype,
                                                  std::uint64_t max_shard_bytes) {
  namespace fs = std::filesystem;
  fs::create_directories(folder);
  const std::vector<SafetensorsFilePlan> files =
      plan_safetensors_folder(tensors, dtype, max_shard_bytes);
  std::vector<std::string> written;
  for (const auto& file : files) {
    const std::string path = (fs::path(folder) / file.name).string();
    write_safetensors_file(path, tensors.subspan(file.first, file.end - file.first), dtype);
    written.push_back(path);
  }
  if (files.size() == 1) return written;
  const std::string index_path = (fs::path(folder) / "model.safetensors.index.json").string();
  core::OutputFile out(index_path);
  out.write(safetensors_index_json(tensors, files, dtype));
  out.close();
  written.push_back(index_path);
  return written;
}

}  // namespace dyncp::model
