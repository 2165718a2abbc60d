// Checks shared by the subcommands' options: every number has a readable range and every path must
// be non-empty, checked by CLI11 while parsing (before any data is loaded), so a bad value fails as
// `error: --name: must be ...`; and the memory check made before a large allocation.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <string>

namespace fp8kit::cli {

// A whole number in [min, max], written as plain decimal digits with an optional '-' (CLI11's own
// conversion wraps -1 to 2^64 - 1 in unsigned options and reads "nan" or "1e3" into integers).
CLI::Validator whole_number(int64_t min, int64_t max);

// A finite number in [min, max] (decimal, e.g. 0.2 or 2e-1).
CLI::Validator real_number(double min, double max);

// A non-empty path ("" would otherwise mean "not given" and, for --data, start a download).
CLI::Validator non_empty_path();

// The one rule for --seed in every subcommand: a whole number from 0 to the largest value of the
// seed's type (2^64 - 1; 2^32 - 1 where the seed is numpy's 32-bit one).
CLI::Validator seed_number(uint64_t max);

template <typename Seed>
CLI::Option* add_seed_option(CLI::App& app, Seed& seed, const std::string& description) {
  static_assert(std::is_unsigned_v<Seed>);
  return app.add_option("--seed", seed, description)
      ->capture_default_str()
      ->check(seed_number(std::numeric_limits<Seed>::max()));
}

// Bytes this process can still allocate: the least of MemAvailable (/proc/meminfo), the address-space
// limit (ulimit -v) less what is mapped, and the cgroup's memory.max less its memory.current.
uint64_t available_memory();

// Before allocating about `bytes` for `what`: fails with both amounts and `fix` when they do not fit.
void require_memory(uint64_t bytes, const std::string& what, const std::string& fix);

}  // namespace fp8kit::cli
