#include "data/indexed_dataset.hpp"

#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "core/output_file.hpp"

namespace dyncp::data {

namespace {

constexpr char index_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::size_t header_size = 34;

int dtype_size(std::uint8_t code) {
  switch (code) {
    case 1:
      return 1;
    case 3:
      return 2;
    case 4:
      return 4;
    case 5:
      return 8;
    case 8:
      return 2;
    default:
      return 0;
  }
}

template <typename T>
T read_at(const std::byte* data, std::size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(T));
  return value;
}

}  // namespace

IndexedDataset::IndexedDataset(const std::filesystem::path& prefix) {
  const std::string index_name = prefix.string() + ".idx";
  bin_name_ = prefix.string() + ".bin";
  const MappedFile index_file(index_name);
  bin_file_ = MappedFile(bin_name_);
  const std::byte* data = index_file.data();
  const std::size_t size = index_file.size();
  if (size < header_size) {
    core::throw_data_error(
        index_name, "truncated index: " + std::to_string(size) + " bytes, the header alone is 34");
  }
  if (std::memcmp(data, index_magic, sizeof(index_magic)) != 0) {
    core::throw_data_error(index_name,
                           "not a Megatron indexed dataset index (magic \"MMIDIDX\" missing)");
  }
  const auto version = read_at<std::uint64_t>(data, 9);
  if (version != 1) {
    core::throw_data_error(index_name,
                           "unsupported index version " + std::to_string(version) + "; expected 1");
  }
  dtype_code_ = read_at<std::uint8_t>(data, 17);
  dtype_size_ = dtype_size(dtype_code_);
  if (dtype_size_ == 0) {
    core::throw_data_error(index_name,
                           "dtype code " + std::to_string(dtype_code_) +
                               " is not an integer token type (expected 1, 3, 4, 5 or 8)");
  }
  const auto sequence_count = read_at<std::uint64_t>(data, 18);
  const auto document_entries = read_at<std::uint64_t>(data, 26);
  const std::size_t expected =
      header_size + sequence_count * 4 + sequence_count * 8 + document_entries * 8;
  if (sequence_count > size || document_entries > size || size < expected) {
    core::throw_data_error(index_name, "truncated index: " + std::to_string(size) +
                                           " bytes, the header promises " +
                                           std::to_string(expected));
  }
  // Lengths start at byte 34 and pointers at 34 + 4S: not aligned for direct access, so copy.
  // (An empty vector's data() may be null, which memcpy must not get even for 0 bytes.)
  const auto copy = [](auto& values, const std::byte* from) {
    if (!values.empty()) std::memcpy(values.data(), from, values.size() * sizeof(values[0]));
  };
  sequence_lengths_.resize(sequence_count);
  copy(sequence_lengths_, data + header_size);
  // Pointers start at 34 + 4S, which is 8-byte aligned only for some S: copy them when not.
  const std::byte* pointer_bytes = data + header_size + sequence_count * 4;
  std::vector<std::int64_t> pointers(sequence_count);
  copy(pointers, pointer_bytes);
  document_indices_.resize(document_entries);
  copy(document_indices_, pointer_bytes + sequence_count * 8);
  if (document_entries == 0 || document_indices_.front() != 0 ||
      document_indices_.back() != static_cast<std::int64_t>(sequence_count)) {
    core::throw_data_error(index_name, "document_indices must run from 0 to the sequence count");
  }
  for (std::size_t k = 1; k < document_entries; ++k) {
    if (document_indices_[k] < document_indices_[k - 1]) {
      core::throw_data_error(
          index_name, "document_indices are not non-decreasing at entry " + std::to_string(k));
    }
  }
  const auto bin_size = static_cast<std::int64_t>(bin_file_.size());
  for (std::size_t s = 0; s < sequence_count; ++s) {
    // Compared without forming pointer + length, which overflows for a pointer near 2^63.
    const std::int64_t bytes = static_cast<std::int64_t>(sequence_lengths_[s]) * dtype_size_;
    if (sequence_lengths_[s] < 0 || pointers[s] < 0 || pointers[s] > bin_size ||
        bytes > bin_size - pointers[s]) {
      core::throw_data_error(bin_name_, "truncated data file: sequence " + std::to_string(s) +
                                            " (" + std::to_string(sequence_lengths_[s]) +
                                            " tokens at byte " + std::to_string(pointers[s]) +
                                            ") does not lie inside the file's " +
                                            std::to_string(bin_size) + " bytes");
    }
  }
  sequence_pointers_ = std::move(pointers);
}

std::int64_t IndexedDataset::document_length(std::int64_t index) const {
  std::int64_t length = 0;
  for (std::int64_t s = document_indices_[static_cast<std::size_t>(index)];
       s < document_indices_[static_cast<std::size_t>(index) + 1]; ++s) {
    length += sequence_lengths_[static_cast<std::size_t>(s)];
  }
  return length;
}

void IndexedDataset::read_document(std::int64_t index, std::vector<std::int32_t>& tokens) const {
  for (std::int64_t s = document_indices_[static_cast<std::size_t>(index)];
       s < document_indices_[static_cast<std::size_t>(index) + 1]; ++s) {
    const std::byte* begin = bin_file_.data() + sequence_pointers_[static_cast<std::size_t>(s)];
    const std::int32_t count = sequence_lengths_[static_cast<std::size_t>(s)];
    for (std::int32_t t = 0; t < count; ++t) {
      const std::byte* item =
          begin + static_cast<std::size_t>(t) * static_cast<std::size_t>(dtype_size_);
      std::int64_t id = 0;
      switch (dtype_code_) {
        case 1:
          id = read_at<std::uint8_t>(item, 0);
          break;
        case 3:
          id = read_at<std::int16_t>(item, 0);
          break;
        case 4:
          id = read_at<std::int32_t>(item, 0);
          break;
        case 5:
          id = read_at<std::int64_t>(item, 0);
          break;
        case 8:
          id = read_at<std::uint16_t>(item, 0);
          break;
        default:
          break;
      }
      // Token ids are int32 everywhere downstream: a wider id is refused, never truncated
      // (4294967301 would become 5, a valid id).
      if (id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
        core::throw_data_error(bin_name_ + "#" + std::to_string(index),
                               "token id " + std::to_string(id) + " at position " +
                                   std::to_string(tokens.size()) +
                                   " is not a 32-bit token id (refused, not truncated)");
      }
      tokens.push_back(static_cast<std::int32_t>(id));
    }
  }
}

void write_indexed_dataset(const std::filesystem::path& prefix,
                           const std::vector<std::vector<std::int32_t>>& documents,
                           std::uint8_t dtype_code) {
  const int item_size = dtype_size(dtype_code);
  DYNCP_CHECK(item_size > 0, "unsupported dtype code for writing");
  // .bin first, then .idx, each through a temporary and a rename: a failed write leaves no
  // partial file under either name (a reader opens the .idx first).
  std::vector<std::int64_t> pointers;
  core::write_file_replacing(prefix.string() + ".bin", [&](core::OutputFile& bin) {
    std::int64_t offset = 0;
    std::vector<char> bytes;
    for (const auto& document : documents) {
      pointers.push_back(offset);
      bytes.clear();
      for (const std::int32_t id : document) {
        const std::int64_t wide = id;
        const char* first = reinterpret_cast<const char*>(&wide);  // little-endian truncation
        bytes.insert(bytes.end(), first, first + item_size);
      }
      bin.write(bytes.data(), bytes.size());
      offset += static_cast<std::int64_t>(document.size()) * item_size;
    }
  });
  core::write_file_replacing(prefix.string() + ".idx", [&](core::OutputFile& index) {
    const auto write = [&index](const auto& value) { index.write(&value, sizeof(value)); };
    index.write(index_magic, sizeof(index_magic));
    write(std::uint64_t{1});
    write(dtype_code);
    write(static_cast<std::uint64_t>(documents.size()));
    write(static_cast<std::uint64_t>(documents.size() + 1));
    for (const auto& document : documents) write(static_cast<std::int32_t>(document.size()));
    for (const std::int64_t pointer : pointers) write(pointer);
    for (std::size_t k = 0; k <= documents.size(); ++k) write(static_cast<std::int64_t>(k));
  });
}

}  // namespace dyncp::data
