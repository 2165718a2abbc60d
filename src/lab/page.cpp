// Tables and their CSV files (see page.h).
#include "lab/page.h"

#include <fmt/format.h>

namespace fp8kit::lab {

std::string num(double v) { return fmt::format("{:.6g}", v); }

std::string percent(double fraction) { return fmt::format("{:.3g}%", 100.0 * fraction); }

void csv_link(report::HtmlPage& page, const LabOptions& options, const std::string& file,
              const report::CsvRow& header, const std::vector<report::CsvRow>& rows) {
  report::write_csv((options.out / file).string(), header, rows);
  page.links({{"CSV: " + file, file}});
}

void csv_table(report::HtmlPage& page, const LabOptions& options, const std::string& file,
               const report::CsvRow& header, const std::vector<report::CsvRow>& rows, std::string_view caption,
               const std::vector<report::Tone>& row_tones) {
  page.table(header, rows, caption, row_tones);
  csv_link(page, options, file, header, rows);
}

}  // namespace fp8kit::lab
