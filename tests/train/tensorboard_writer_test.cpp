#include "train/tensorboard_writer.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "train/tfrecord.hpp"

using namespace dyncp::train;

TEST_CASE("crc32c matches the Castagnoli check value and the masked form", "[train][tensorboard]") {
  // The standard check value of CRC-32C (RFC 3720 appendix B.4 lists the same polynomial).
  CHECK(crc32c("123456789") == 0xE3069283U);
  CHECK(crc32c("") == 0U);
  const std::uint32_t crc = crc32c("123456789");
  CHECK(masked_crc32c("123456789") == ((crc >> 15) | (crc << 17)) + 0xA282EAD8U);
}

TEST_CASE("a TFRecord frame holds the length, both CRCs and the data", "[train][tensorboard]") {
  const std::string data = "hello event";
  const std::string frame = tfrecord_frame(data);
  REQUIRE(frame.size() == 8 + 4 + data.size() + 4);
  std::uint64_t length = 0;
  std::memcpy(&length, frame.data(), 8);
  CHECK(length == data.size());
  std::uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, frame.data() + 8, 4);
  std::memcpy(&data_crc, frame.data() + 12 + data.size(), 4);
  CHECK(length_crc == masked_crc32c(frame.substr(0, 8)));
  CHECK(data_crc == masked_crc32c(data));
  CHECK(frame.substr(12, data.size()) == data);
}

TEST_CASE("a scalar summary value is the protobuf TensorBoard reads", "[train][tensorboard]") {
  // Summary{value: [{tag: "a", simple_value: 1.0f}]} = 0a 08 | 0a 01 'a' | 15 00 00 80 3f
  const std::string bytes = tensorboard::scalar_value("a", 1.0f);
  const std::string expected(
      "\x0a\x08\x0a\x01"
      "a\x15\x00\x00\x80\x3f",
      10);
  CHECK(bytes == expected);
}

TEST_CASE("the writer starts with a file-version event and appends one per step",
          "[train][tensorboard]") {
  const auto folder = std::filesystem::temp_directory_path() / "dyncp_tensorboard_writer_test";
  std::filesystem::remove_all(folder);
  std::string path;
  {
    TensorBoardWriter writer(folder.string());
    path = writer.path();
    StepMetrics metrics;
    metrics.iteration = 1;
    metrics.group_sizes = {{1, 3}, {2, 1}};
    writer.write(metrics);
  }
  REQUIRE(std::filesystem::path(path).filename().string().find("tfevents") != std::string::npos);
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  const std::string text = content.str();
  // Two records; the first carries "brain.Event:2".
  std::uint64_t first = 0;
  std::memcpy(&first, text.data(), 8);
  CHECK(text.substr(12, first).find("brain.Event:2") != std::string::npos);
  std::uint64_t second = 0;
  std::memcpy(&second, text.data() + 16 + first, 8);
  CHECK(text.size() == 16 + first + 16 + second);
  CHECK(text.find("cp-group-size") != std::string::npos);
  std::filesystem::remove_all(folder);
}

TEST_CASE("an unwritable tensorboard_dir is a config error naming the key",
          "[train][tensorboard]") {
  REQUIRE_THROWS_WITH(TensorBoardWriter("/proc/no_such_dir/tb"),
                      Catch::Contains("logger.tensorboard_dir"));
}
