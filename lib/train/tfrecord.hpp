#pragma once
// TFRecord framing, the container of TensorBoard event files: each record is
//
//   u64 length (little-endian) | u32 masked_crc32c(length bytes) | data | u32 masked_crc32c(data)
//
// CRC-32C is the Castagnoli polynomial (reflected 0x82F63B78); the mask rotates it right by 15
// bits and adds 0xa282ead8, so a CRC over data that itself holds CRCs stays well distributed.

#include <cstdint>
#include <string>
#include <string_view>

namespace dyncp::train {

std::uint32_t crc32c(std::string_view bytes);
std::uint32_t masked_crc32c(std::string_view bytes);
// One framed record around `data`.
std::string tfrecord_frame(std::string_view data);

}  // namespace dyncp::train
