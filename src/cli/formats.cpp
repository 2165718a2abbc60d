// `fp8kit formats`: the constants of E4M3 and E5M2 side by side, with BF16 and FP16 for comparison.
#include "cli/command.h"
#include "lab/formats_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace fp8kit::cli {
namespace {

void print_formats() {
  const lab::FormatsTable table = lab::formats_table();
  std::vector<size_t> widths(table.header.size());
  for (size_t i = 0; i < widths.size(); ++i) widths[i] = table.header[i].size();
  for (const report::CsvRow& cells : table.rows) {
    for (size_t i = 0; i < cells.size(); ++i) widths[i] = std::max(widths[i], cells[i].size());
  }
  auto print_line = [&](const report::CsvRow& cells) {
    std::string line = fmt::format("{:<{}}", cells[0], widths[0]);
    for (size_t i = 1; i < cells.size(); ++i) line += fmt::format("  {:<{}}", cells[i], widths[i]);
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print("{}\n", line);
  };
  print_line(table.header);
  for (const report::CsvRow& cells : table.rows) print_line(cells);
  fmt::print("\n{}\n", lab::kFormatsNote);
}

void setup(CLI::App& app) {
  app.footer("Prints one column per format: e4m3, e5m2 (FP8), bf16 and fp16 for comparison.");
  app.callback(print_formats);
}

const bool registered = register_command({"formats", "Table of the FP8 formats (E4M3, E5M2) beside BF16 and FP16", setup});

}  // namespace
}  // namespace fp8kit::cli
