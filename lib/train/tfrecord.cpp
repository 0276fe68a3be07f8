#include "train/tfrecord.hpp"

#include <array>

namespace dyncp::train {

namespace {

// Byte-at-a-time table of the reflected Castagnoli polynomial. Event files are small (a few
// hundred bytes per step), so the table form is fast enough.
constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    std::uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1U) != 0 ? 0x82F63B78U : 0U);
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> crc_table = make_table();

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFFU);
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  std::uint32_t crc = 0xFFFFFFFFU;
  for (const char c : bytes)
    crc = (crc >> 8) ^ crc_table[(crc ^ static_cast<std::uint8_t>(c)) & 0xFFU];
  return crc ^ 0xFFFFFFFFU;
}

std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8U;
}

std::string tfrecord_frame(std::string_view data) {
  std::string length;
  append_le(length, data.size(), 8);
  std::string record = length;
  append_le(record, masked_crc32c(length), 4);
  record.append(data);
  append_le(record, masked_crc32c(data), 4);
  return record;
}

}  // namespace dyncp::train
