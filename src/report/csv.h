// CSV files for reports: a header row and rows of already-formatted cells (RFC 4180 quoting).
#pragma once

#include <string>
#include <vector>

namespace fp8kit::report {

using CsvRow = std::vector<std::string>;

std::string csv_line(const CsvRow& cells);  // quoted where needed, ends with '\n'
// Writes header + rows to `path` (through a temporary file); every row must have the header's width.
void write_csv(const std::string& path, const CsvRow& header, const std::vector<CsvRow>& rows);

// Writes `text` to `path` through a temporary file renamed into place.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace fp8kit::report
