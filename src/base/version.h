// fp8kit's version, as `fp8kit --version` prints it and checkpoints record it. The number itself
// comes from project() in CMakeLists.txt.
#pragma once

#include <string_view>

namespace fp8kit {

inline constexpr std::string_view kVersion = FP8KIT_VERSION;

}  // namespace fp8kit
