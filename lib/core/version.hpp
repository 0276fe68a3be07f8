#pragma once

namespace dyncp::core {
inline constexpr const char* version_string = "0.1.0";
}
