// A fresh private directory for a test's files, under the system temp directory: made with mkdtemp,
// so tests that ctest runs in parallel never share one and a stale one from a crash never collides.
#pragma once

#include <errno.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace fp8kit::testing {

// Created empty as <temp>/fp8kit_test_<name>_XXXXXX; removed with its contents when the object goes.
class TempDir {
 public:
  explicit TempDir(std::string_view name) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("fp8kit_test_" + std::string(name) + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "cannot create the temporary directory " + pattern);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover directory is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& relative) const { return path_ / relative; }

 private:
  std::filesystem::path path_;
};

}  // namespace fp8kit::testing
