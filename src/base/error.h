// Errors: fp8kit reports bad input by throwing fp8kit::Error with a message that says what to fix.
#pragma once

#include <stdexcept>
#include <string>

namespace fp8kit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fp8kit

// nvcc cannot compile fmt's compile-time format checks, so .cu files throw fp8kit::Error directly
// (or call helpers compiled as C++); everything else uses fail() and FP8KIT_CHECK.
#ifndef __CUDACC__
#include <fmt/format.h>

namespace fp8kit {

// Throws fp8kit::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace fp8kit

// Checks a precondition on user-facing input; the message names the value and what is expected.
#define FP8KIT_CHECK(cond, ...)               \
  do {                                        \
    if (!(cond)) ::fp8kit::fail(__VA_ARGS__); \
  } while (0)
#endif
