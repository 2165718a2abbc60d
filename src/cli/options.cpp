// Range, path and seed validators for the subcommands' options, and the memory check.
#include "cli/options.h"

#include "base/error.h"

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>

namespace fp8kit::cli {

namespace {

template <typename T>
std::string check_whole(const std::string& text, T min, T max) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc() && ptr == end && value >= min && value <= max) return {};
  return fmt::format("must be a whole number from {} to {}, not '{}'", min, max, text);
}

// "512 MiB", "1.5 GiB".
std::string bytes_text(uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  for (; value >= 1024 && unit < 6; ++unit) value /= 1024;
  return unit == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

// The number in `path` after the word `key` (e.g. "MemAvailable:", in kB), or its first number.
std::optional<uint64_t> read_number(const char* path, const std::string& key = "") {
  std::ifstream in(path);
  if (!key.empty()) {
    for (std::string word; in >> word && word != key;) {
    }
  }
  uint64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

}  // namespace

CLI::Validator whole_number(int64_t min, int64_t max) {
  return CLI::Validator([min, max](std::string& text) { return check_whole<int64_t>(text, min, max); },
                        fmt::format("{}..{}", min, max));
}

CLI::Validator seed_number(uint64_t max) {
  return CLI::Validator([max](std::string& text) { return check_whole<uint64_t>(text, 0, max); },
                        fmt::format("0..{}", max));
}

CLI::Validator real_number(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const char* begin = text.c_str();
        char* end = nullptr;
        const double value = std::strtod(begin, &end);
        if (!text.empty() && end == begin + text.size() && std::isfinite(value) && value >= min && value <= max) {
          return {};
        }
        return fmt::format("must be a number from {} to {}, not '{}'", min, max, text);
      },
      fmt::format("{}..{}", min, max));
}

CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must be a path, not empty" : ""; }, "PATH");
}

uint64_t available_memory() {
  uint64_t available = std::numeric_limits<uint64_t>::max();
  if (const auto kib = read_number("/proc/meminfo", "MemAvailable:")) {
    available = *kib * 1024;
  } else if (const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE); pages > 0 && size > 0) {
    available = static_cast<uint64_t>(pages) * static_cast<uint64_t>(size);
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const uint64_t mapped = read_number("/proc/self/statm").value_or(0) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    available = std::min<uint64_t>(available, limit.rlim_cur > mapped ? limit.rlim_cur - mapped : 0);
  }
  const auto cgroup_max = read_number("/sys/fs/cgroup/memory.max");  // "max" (no limit) reads as nullopt
  const auto cgroup_current = read_number("/sys/fs/cgroup/memory.current");
  if (cgroup_max && cgroup_current) {
    // memory.current counts the file cache, which the kernel reclaims before it refuses memory: a
    // long-lived container sits near its limit with a cold cache that is really free.
    const uint64_t cache = read_number("/sys/fs/cgroup/memory.stat", "inactive_file").value_or(0);
    const uint64_t used = *cgroup_current > cache ? *cgroup_current - cache : 0;
    available = std::min(available, *cgroup_max > used ? *cgroup_max - used : 0);
  }
  return available;
}

void require_memory(uint64_t bytes, const std::string& what, const std::string& fix) {
  const uint64_t available = available_memory();
  FP8KIT_CHECK(bytes <= available, "{} needs about {} of memory but {} is available; {}", what, bytes_text(bytes),
               bytes_text(available), fix);
}

}  // namespace fp8kit::cli
