// fp8kit's version, as `fp8kit --version` prints it and checkpoints record it. The number itself
// comes from project() in CMakeLists.txt, as an unquoted -DFP8KIT_VERSION=0.1.0 (pkg-config cannot
// carry quotes), made a string here.
#pragma once

#include <string_view>

namespace fp8kit {

#define FP8KIT_STRINGIFY_(x) #x
#define FP8KIT_STRINGIFY(x) FP8KIT_STRINGIFY_(x)
inline constexpr std::string_view kVersion = FP8KIT_STRINGIFY(FP8KIT_VERSION);

}  // namespace fp8kit
