// CSV writing and the atomic file write shared by the report writers.
#include "report/csv.h"

#include "base/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fp8kit::report {

std::string csv_line(const CsvRow& cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) line += ',';
    const std::string& c = cells[i];
    if (c.find_first_of(",\"\n\r") == std::string::npos) {
      line += c;
      continue;
    }
    line += '"';
    for (char ch : c) {
      if (ch == '"') line += '"';
      line += ch;
    }
    line += '"';
  }
  return line + '\n';
}

void write_csv(const std::string& path, const CsvRow& header, const std::vector<CsvRow>& rows) {
  std::string text = csv_line(header);
  for (size_t r = 0; r < rows.size(); ++r) {
    FP8KIT_CHECK(rows[r].size() == header.size(), "CSV {}: row {} has {} cells but the header has {}", path, r,
                 rows[r].size(), header.size());
    text += csv_line(rows[r]);
  }
  write_file_atomically(path, text);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    FP8KIT_CHECK(out.good(), "cannot write {}: {} (does the folder exist and is it writable?)", temporary,
                 std::strerror(errno));
    out << text;
    out.flush();
    if (!out.good()) {
      std::remove(temporary.c_str());
      fail("writing {} failed: {}", temporary, std::strerror(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    fail("cannot move {} to {}: {}", temporary, path, ec.message());
  }
}

}  // namespace fp8kit::report
