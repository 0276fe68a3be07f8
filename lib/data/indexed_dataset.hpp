#pragma once
// Megatron-LM indexed datasets (a `.bin` of raw token ids and an `.idx` index, "MMIDIDX"
// version 1). One document is one sample, with loss on every token. Byte layout of `.idx`
// (little-endian):
//   offset 0   magic        9 bytes  "MMIDIDX\0\0"
//   offset 9   version      u64      1
//   offset 17  dtype code   u8       1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
//                                    (token ids: 1, 3, 4, 5, 8 are accepted)
//   offset 18  S            u64      number of sequences
//   offset 26  D            u64      number of entries in document_indices (documents + 1)
//   offset 34  sequence_lengths  i32[S]   tokens per sequence
//              sequence_pointers i64[S]   byte offset of each sequence in `.bin`
//              document_indices  i64[D]   0 = d_0 < ... <= d_{D-1} = S; document k is
//                                         sequences [d_k, d_{k+1})
// `.bin` holds the sequences' ids back to back in the dtype above. Both files are memory-mapped.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "data/mapped_file.hpp"

namespace dyncp::data {

class IndexedDataset {
 public:
  // `prefix` is the path without .bin/.idx. Throws a data error naming the file for a bad
  // magic or version, an unsupported dtype, a truncated file or inconsistent offsets.
  explicit IndexedDataset(const std::filesystem::path& prefix);

  std::int64_t num_documents() const {
    return static_cast<std::int64_t>(document_indices_.size()) - 1;
  }
  // Token count of document `index`.
  std::int64_t document_length(std::int64_t index) const;
  // Appends the ids of document `index` to `tokens`.
  void read_document(std::int64_t index, std::vector<std::int32_t>& tokens) const;

 private:
  std::string bin_name_;
  MappedFile bin_file_;
  int dtype_size_ = 4;
  std::uint8_t dtype_code_ = 4;
  std::vector<std::int32_t> sequence_lengths_;
  std::vector<std::int64_t> sequence_pointers_;
  std::vector<std::int64_t> document_indices_;
};

// Writes `documents` as prefix.bin / prefix.idx with the given dtype code (one sequence per
// document); used by tests and for converting JSONL token data.
void write_indexed_dataset(const std::filesystem::path& prefix,
                           const std::vector<std::vector<std::int32_t>>& documents,
                           std::uint8_t dtype_code = 4);

}  // namespace dyncp::data
