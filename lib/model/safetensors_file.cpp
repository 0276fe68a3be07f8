// Memory-mapped safetensors files and checkpoint folders (single file or sharded with an index).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/safetensors.hpp"

namespace dyncp::model {

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    core::throw_data_error(path,
                           std::string("cannot open safetensors file: ") + std::strerror(errno));
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    core::throw_data_error(path, "not a regular file");
  }
  mapped_size_ = static_cast<std::size_t>(status.st_size);
  if (mapped_size_ > 0) {
    void* address = ::mmap(nullptr, mapped_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      ::close(fd);
      core::throw_data_error(path, std::string("cannot mmap: ") + std::strerror(errno));
    }
    mapped_ = static_cast<const std::uint8_t*>(address);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  try {
    header_ = parse_safetensors_header({mapped_, mapped_size_}, path);
  } catch (...) {
    if (mapped_ != nullptr) ::munmap(const_cast<std::uint8_t*>(mapped_), mapped_size_);
    throw;
  }
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) index_of_[header_.tensors[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped_ != nullptr) ::munmap(const_cast<std::uint8_t*>(mapped_), mapped_size_);
}

const StoredTensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_of_.find(name);
  return it == index_of_.end() ? nullptr : &header_.tensors[it->second];
}

void SafetensorsFile::read_f32(const std::string& name, std::span<float> out) const {
  const StoredTensorInfo& info = float_tensor(name);
  if (static_cast<std::int64_t>(out.size()) != info.num_elements())
    core::throw_data_error(path_ + ": tensor '" + name + "'",
                           "shape " + shape_text(info.shape) + " has " +
                               std::to_string(info.num_elements()) +
                               " elements, the destination holds " + std::to_string(out.size()));
  read_f32_range(name, 0, out);
}

void SafetensorsFile::read_f32_range(const std::string& name, std::int64_t first_element,
                                     std::span<float> out) const {
  const StoredTensorInfo& info = float_tensor(name);
  const auto end = first_element + static_cast<std::int64_t>(out.size());
  if (first_element < 0 || end > info.num_elements())
    core::throw_data_error(path_ + ": tensor '" + name + "'",
                           "elements [" + std::to_string(first_element) + ", " +
                               std::to_string(end) + ") are outside its " +
                               std::to_string(info.num_elements()));
  const std::uint8_t* source =
      mapped_ + 8 + header_.header_bytes + info.data_begin +
      static_cast<std::uint64_t>(first_element) * stored_dtype_size(info.dtype);
  convert_to_f32(info.dtype, source, out.size(), out.data());
}

const StoredTensorInfo& SafetensorsFile::float_tensor(const std::string& name) const {
  const StoredTensorInfo* info = find(name);
  if (info == nullptr) core::throw_data_error(path_, "no tensor named '" + name + "'");
  if (!is_float_dtype(info->dtype))
    core::throw_data_error(path_ + ": tensor '" + name + "'",
                           std::string("dtype ") + stored_dtype_name(info->dtype) +
                               " cannot be read as floating point weights (expected "
                               "BF16, F16, F32 or F64)");
  return *info;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& folder) {
  namespace fs = std::filesystem;
  const fs::path root = folder;
  if (!fs::is_directory(root))
    core::throw_data_error(folder, "checkpoint folder does not exist or is not a folder");
  const fs::path index_path = root / "model.safetensors.index.json";
  const fs::path single_path = root / "model.safetensors";
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    const auto index = nlohmann::json::parse(in, nullptr, false);
    const std::string where = index_path.string();
    if (index.is_discarded() || !index.is_object())
      core::throw_data_error(where, "index is not a valid JSON object");
    const auto map_it = index.find("weight_map");
    if (map_it == index.end() || !map_it->is_object())
      core::throw_data_error(where, "index has no 'weight_map' object");
    std::map<std::string, std::size_t> file_number;
    for (const auto& [tensor, shard] : map_it->items()) {
      if (!shard.is_string())
        core::throw_data_error(where, "weight_map['" + tensor + "'] is not a file name");
      const std::string shard_name = shard.get<std::string>();
      if (shard_name.find('/') != std::string::npos || shard_name == ".." || shard_name.empty())
        core::throw_data_error(where, "weight_map['" + tensor + "'] = '" + shard_name +
                                          "' is not a file name inside the folder");
      auto [it, inserted] = file_number.try_emplace(shard_name, files_.size());
      if (inserted) {
        const fs::path shard_path = root / shard_name;
        if (!fs::exists(shard_path))
          core::throw_data_error(where, "shard '" + shard_name + "' (holding tensor '" + tensor +
                                            "') is missing from " + folder);
        files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
      }
      if (files_[it->second]->find(tensor) == nullptr)
        core::throw_data_error(where, "tensor '" + tensor + "' is listed in shard '" + shard_name +
                                          "' but that shard does not contain it");
      file_of_tensor_[tensor] = it->second;
    }
  } else if (fs::exists(single_path)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single_path.string()));
    for (const auto& tensor : files_[0]->header().tensors) file_of_tensor_[tensor.name] = 0;
  } else {
    core::throw_data_error(folder,
                           "no model.safetensors or model.safetensors.index.json in the "
                           "checkpoint folder");
  }
}

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(file_of_tensor_.size());
  for (const auto& [name, file] : file_of_tensor_) names.push_back(name);
  return names;
}

const StoredTensorInfo* SafetensorsCheckpoint::find(const std::string& name) const {
  const auto it = file_of_tensor_.find(name);
  return it == file_of_tensor_.end() ? nullptr : files_[it->second]->find(name);
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
  const auto it = file_of_tensor_.find(name);
  DYNCP_CHECK(it != file_of_tensor_.end(), "file_of on a missing tensor " + name);
  return files_[it->second]->path();
}

void SafetensorsCheckpoint::read_f32(const std::string& name, std::span<float> out) const {
  const auto it = file_of_tensor_.find(name);
  DYNCP_CHECK(it != file_of_tensor_.end(), "read_f32 on a missing tensor " + name);
  files_[it->second]->read_f32(name, out);
}

void SafetensorsCheckpoint::read_f32_range(const std::string& name, std::int64_t first_element,
                                           std::span<float> out) const {
  const auto it = file_of_tensor_.find(name);
  DYNCP_CHECK(it != file_of_tensor_.end(), "read_f32_range on a missing tensor " + name);
  files_[it->second]->read_f32_range(name, first_element, out);
}

}  // namespace dyncp::model
