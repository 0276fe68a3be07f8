#pragma once
// safetensors files: `[u64 little-endian N][N bytes of JSON header][data buffer]`. The header maps
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} relative to the data
// buffer, plus an optional "__metadata__" object. Files are read through mmap and converted to f32
// on request (BF16, F16, F32 and F64 on disk); every other dtype is listed but cannot be read as
// floats. A header that lies (offsets outside the buffer, a byte range that does not match the
// shape, overlapping tensors), a truncated file or an unknown dtype is a data error naming the
// file and the tensor.
//
// Folders hold either one `model.safetensors` or shards listed by `model.safetensors.index.json`
// (`{"metadata": {"total_size": bytes}, "weight_map": {name: shard file}}`).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace dyncp::model {

// dtypes of the safetensors format; `unreadable` ones can be listed but not converted to f32.
enum class StoredDType { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, f8_e4m3, f8_e5m2 };

std::size_t stored_dtype_size(StoredDType dtype);
const char* stored_dtype_name(StoredDType dtype);  // as written in headers: "BF16", "F32", ...
bool is_float_dtype(StoredDType dtype);            // readable as f32

struct StoredTensorInfo {
  std::string name;
  StoredDType dtype = StoredDType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t data_begin = 0;  // byte offsets in the data buffer
  std::uint64_t data_end = 0;
  std::int64_t num_elements() const;
};

struct SafetensorsHeader {
  std::uint64_t header_bytes = 0;         // N
  std::uint64_t data_bytes = 0;           // size of the data buffer the header was checked against
  std::vector<StoredTensorInfo> tensors;  // sorted by data_begin
  std::map<std::string, std::string> metadata;
};

// Validates the header of a whole file held in `bytes` (the data buffer is bytes after 8 + N).
// `file_name` only labels errors. Throws core::Error (data) on any inconsistency.
SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> bytes,
                                           const std::string& file_name);

// Converts `count` stored elements at `source` to f32.
void convert_to_f32(StoredDType dtype, const std::uint8_t* source, std::size_t count, float* out);

// One memory-mapped safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const StoredTensorInfo* find(const std::string& name) const;  // nullptr when absent
  // Converts the named tensor into `out` (size must equal its element count).
  void read_f32(const std::string& name, std::span<float> out) const;
  // Converts elements [first_element, first_element + out.size()) of the row-major tensor.
  void read_f32_range(const std::string& name, std::int64_t first_element,
                      std::span<float> out) const;

 private:
  const StoredTensorInfo& float_tensor(const std::string& name) const;  // found, float dtype
  std::string path_;
  const std::uint8_t* mapped_ = nullptr;
  std::size_t mapped_size_ = 0;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t> index_of_;
};

// A checkpoint folder: `model.safetensors`, or shards named by `model.safetensors.index.json`.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& folder);

  std::vector<std::string> tensor_names() const;  // sorted
  const StoredTensorInfo* find(const std::string& name) const;
  void read_f32(const std::string& name, std::span<float> out) const;
  void read_f32_range(const std::string& name, std::int64_t first_element,
                      std::span<float> out) const;
  const std::string& file_of(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::size_t> file_of_tensor_;
};

// A tensor to write: f32 values in row-major order, either held (`values`) or produced when
// the writer reaches the tensor (`fill`, given a buffer of the shape's element count). Fills
// run in the given order, one at a time, so values built on demand (every expert of a layer,
// gathered from the ranks that hold them) need one tensor's memory, not the file's.
struct TensorToWrite {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> values;
  std::function<void(std::span<float>)> fill;
  std::int64_t numel() const;
};

// Writes one file, storing values as `dtype` (F32, BF16 or F16). Tensors are written in the
// given order, streamed one at a time; the header is padded with spaces so the data buffer
// starts 8-byte aligned.
void write_safetensors_file(const std::string& path, std::span<const TensorToWrite> tensors,
                            StoredDType dtype);

// The files write_safetensors_folder writes for `tensors` (their names and shapes only): one
// `model.safetensors` when everything fits in `max_shard_bytes` (0 = no limit), else shards
// `model-0000k-of-0000n.safetensors`, split greedily in the given order. Writers that fill one
// file from several processes (each writing its tensors' byte ranges) lay it out from this.
struct SafetensorsFilePlan {
  std::string name;                    // in the folder
  std::size_t first = 0, end = 0;      // tensors [first, end) of the list
  std::string head;                    // the 8-byte length and the padded JSON header
  std::vector<std::uint64_t> offsets;  // per tensor of the file: its data's offset in the file
  std::uint64_t bytes = 0;             // the file's size
};
std::vector<SafetensorsFilePlan> plan_safetensors_folder(std::span<const TensorToWrite> tensors,
                                                         StoredDType dtype,
                                                         std::uint64_t max_shard_bytes = 0);
// `model.safetensors.index.json` of a plan of more than one file.
std::string safetensors_index_json(std::span<const TensorToWrite> tensors,
                                   std::span<const SafetensorsFilePlan> files, StoredDType dtype);
// `values` stored as `dtype` (F32, BF16 or F16) into `buffer`, resized to their bytes.
void encode_safetensors_values(std::vector<std::uint8_t>& buffer, std::span<const float> values,
                               StoredDType dtype);

// Writes the files of plan_safetensors_folder, plus `model.safetensors.index.json` for shards.
// Returns the files written (shards first, index last).
std::vector<std::string> write_safetensors_folder(const std::string& folder,
                                                  std::span<const TensorToWrite> tensors,
                                                  StoredDType dtype,
                                                  std::uint64_t max_shard_bytes = 0);

}  // namespace dyncp::model
