// The message of the fp8kit::Error a call throws, for tests that check what an error says.
#pragma once

#include "base/error.h"

#include <string>

namespace fp8kit::testing {

// What `call` throws as fp8kit::Error, or "no error" when it returns (other exceptions propagate).
template <typename Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace fp8kit::testing
