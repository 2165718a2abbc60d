// What the lab's parts share on the page: tables that are also CSV files beside it, linked from it.
#pragma once

#include "lab/lab.h"
#include "report/html.h"

#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::lab {

// "{:.6g}": the CSV files' and the tables' numbers.
std::string num(double v);
// "12.3%" of a fraction (0.123), 3 significant digits.
std::string percent(double fraction);

// Writes header + rows to options.out / file and links it from the page as "CSV: file".
void csv_link(report::HtmlPage& page, const LabOptions& options, const std::string& file,
              const report::CsvRow& header, const std::vector<report::CsvRow>& rows);
// The table on the page, then csv_link for the same rows.
void csv_table(report::HtmlPage& page, const LabOptions& options, const std::string& file,
               const report::CsvRow& header, const std::vector<report::CsvRow>& rows, std::string_view caption,
               const std::vector<report::Tone>& row_tones = {});

}  // namespace fp8kit::lab
