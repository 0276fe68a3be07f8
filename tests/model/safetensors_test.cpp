// safetensors read / write: round trips (single file, sharded with an index, BF16 / F16 / F32)
// and every kind of bad file, each a data error naming the file and the tensor.
#include "model/safetensors.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dyncp::model {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dyncp_model_safetensors_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_raw(const fs::path& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  std::uint64_t length = header.size();
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out.write(bytes, 8);
  out << header << data;
}

struct Sample {
  std::vector<float> a{1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 65504.0f};
  std::vector<float> b{0.5f, -0.125f, 7.0f};
  std::vector<float> scalar{42.0f};
  std::vector<TensorToWrite> tensors() const {
    return {{"model.a", {2, 3}, a}, {"model.b", {3}, b}, {"scalar", {}, scalar}};
  }
};

std::vector<float> read_all(const SafetensorsCheckpoint& checkpoint, const std::string& name) {
  const auto* info = checkpoint.find(name);
  REQUIRE(info != nullptr);
  std::vector<float> out(static_cast<std::size_t>(info->num_elements()));
  checkpoint.read_f32(name, out);
  return out;
}

TEST_CASE("safetensors round trip in F32, BF16 and F16 keeps values and shapes",
          "[model][safetensors]") {
  const Sample sample;
  const auto dtype = GENERATE(StoredDType::f32, StoredDType::bf16, StoredDType::f16);
  const auto dir = fresh_dir(std::string("single_") + stored_dtype_name(dtype));
  const auto files = write_safetensors_folder(dir.string(), sample.tensors(), dtype);
  REQUIRE(files.size() == 1);
  CHECK(fs::path(files[0]).filename() == "model.safetensors");
  const SafetensorsCheckpoint checkpoint(dir.string());
  CHECK(checkpoint.tensor_names() == std::vector<std::string>{"model.a", "model.b", "scalar"});
  CHECK(checkpoint.find("model.a")->shape == std::vector<std::int64_t>{2, 3});
  CHECK(checkpoint.find("scalar")->shape.empty());
  CHECK(checkpoint.find("model.a")->dtype == dtype);
  // These values are exact in every format written.
  CHECK(read_all(checkpoint, "model.b") == sample.b);
  CHECK(read_all(checkpoint, "scalar") == sample.scalar);
  const auto a = read_all(checkpoint, "model.a");
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(a[i] == Approx(sample.a[i]).epsilon(dtype == StoredDType::f32 ? 0.0 : 4e-3));
  // The data buffer starts 8-byte aligned.
  std::ifstream in(files[0], std::ios::binary);
  std::uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  CHECK((8 + header_bytes) % 8 == 0);
}

TEST_CASE("sharded safetensors with an index round trip", "[model][safetensors]") {
  const Sample sample;
  const auto dir = fresh_dir("sharded");
  const auto files = write_safetensors_folder(dir.string(), sample.tensors(), StoredDType::f32, 24);
  REQUIRE(files.size() == 3);  // two shards + index
  CHECK(fs::path(files[0]).filename() == "model-00001-of-00002.safetensors");
  CHECK(fs::path(files[2]).filename() == "model.safetensors.index.json");
  std::ifstream index_in(files[2]);
  const auto index = nlohmann::json::parse(index_in);
  CHECK(index["metadata"]["total_size"] == 40);
  CHECK(index["weight_map"]["model.b"] == "model-00002-of-00002.safetensors");
  const SafetensorsCheckpoint checkpoint(dir.string());
  CHECK(read_all(checkpoint, "model.a") == sample.a);
  CHECK(read_all(checkpoint, "model.b") == sample.b);
  CHECK(read_all(checkpoint, "scalar") == sample.scalar);
  CHECK(fs::path(checkpoint.file_of("model.b")).filename() == "model-00002-of-00002.safetensors");
}

void require_data_error(const std::function<void()>& action,
                        const std::vector<std::string>& parts) {
  try {
    action();
    FAIL("expected a data error");
  } catch (const core::Error& error) {
    CHECK(error.kind() == core::ErrorKind::data);
    CHECK(error.exit_code() == 2);
    for (const auto& part : parts) CHECK_THAT(error.what(), Catch::Contains(part));
  }
}

TEST_CASE("bad safetensors files are data errors naming file and tensor", "[model][safetensors]") {
  const auto dir = fresh_dir("bad");
  const auto file = (dir / "model.safetensors").string();
  const auto open = [&] { SafetensorsCheckpoint checkpoint(dir.string()); };

  SECTION("no weights at all") {
    require_data_error(open, {dir.string(), "no model.safetensors"});
  }
  SECTION("shorter than the length prefix") {
    std::ofstream(file, std::ios::binary) << "abc";
    require_data_error(open, {file, "truncated"});
  }
  SECTION("header length beyond the file") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "");
    std::filesystem::resize_file(file, 20);
    require_data_error(open, {file, "exceeds the file size"});
  }
  SECTION("data truncated") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
              std::string(8, '\0'));
    require_data_error(open, {file, "'w'", "past the data buffer"});
  }
  SECTION("header lies about the size of a tensor") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})",
              std::string(8, '\0'));
    require_data_error(open, {file, "'w'", "shape [4] of F32 needs 4 x 4 bytes"});
  }
  SECTION("overlapping tensors") {
    write_raw(file, R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                        "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
              std::string(6, '\0'));
    require_data_error(open, {file, "'b'", "overlap", "'a'"});
  }
  SECTION("unknown dtype") {
    write_raw(file, R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})",
              std::string(2, '\0'));
    require_data_error(open, {file, "'w'", "unknown dtype 'Q4_K'"});
  }
  SECTION("negative shape") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
              std::string(4, '\0'));
    require_data_error(open, {file, "'w'", "non-negative"});
  }
  SECTION("header is not JSON") {
    write_raw(file, "{not json", "");
    require_data_error(open, {file, "not valid JSON"});
  }
  SECTION("integer tensors cannot be read as weights") {
    write_raw(file, R"({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
              std::string(8, '\0'));
    const SafetensorsCheckpoint checkpoint(dir.string());
    std::vector<float> out(1);
    require_data_error([&] { checkpoint.read_f32("ids", out); }, {file, "'ids'", "I64"});
  }
  SECTION("index names a missing shard") {
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"weight_map": {"w": "model-00001-of-00002.safetensors"}})";
    require_data_error(open, {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                              "'w'", "missing"});
  }
  SECTION("index names a tensor its shard does not hold") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
              std::string(4, '\0'));
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"weight_map": {"w": "model.safetensors", "v": "model.safetensors"}})";
    require_data_error(open, {"'v'", "does not contain it"});
  }
  SECTION("index escapes the folder") {
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"weight_map": {"w": "../elsewhere.safetensors"}})";
    require_data_error(open, {"'w'", "not a file name inside the folder"});
  }
}

TEST_CASE("f16 and bf16 conversions follow IEEE rounding", "[model][safetensors]") {
  // 1 + 2^-11 is halfway between two f16 values: round to even (1.0); 1 + 3·2^-11 rounds up.
  const std::vector<float> values{1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 0x1p-24f, -0.0f, 1e6f};
  const auto dir = fresh_dir("rounding");
  write_safetensors_folder(dir.string(), std::vector<TensorToWrite>{{"x", {5}, values}},
                           StoredDType::f16);
  const SafetensorsCheckpoint checkpoint(dir.string());
  const auto back = read_all(checkpoint, "x");
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == 1.0f + 0x1p-9f);
  CHECK(back[2] == 0x1p-24f);  // smallest subnormal survives
  CHECK(std::signbit(back[3]));
  CHECK(std::isinf(back[4]));
}

}  // namespace
}  // namespace dyncp::model
