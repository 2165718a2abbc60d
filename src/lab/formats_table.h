// The table of `fp8kit formats` and the lab's Part 1: E4M3 and E5M2 beside BF16 and FP16, one column per
// format, as already-formatted cells (printed aligned by the CLI, as HTML and CSV by the lab).
#pragma once

#include "report/csv.h"

#include <string_view>
#include <vector>

namespace fp8kit::lab {

struct FormatsTable {
  report::CsvRow header;             // "", "e4m3", "e5m2", "bf16", "fp16"
  std::vector<report::CsvRow> rows;  // a property's label, then its value for each format
};
FormatsTable formats_table();

// What the table cannot show: which E4M3 variant, rounding, and what overflow does.
inline constexpr std::string_view kFormatsNote =
    "e4m3 is the OCP \"fn\" variant (no infinity, one NaN pattern per sign); casts round to nearest even.\n"
    "Overflow: saturating casts clamp to +-max; non-saturating (ml_dtypes) give NaN (e4m3) or +-inf (e5m2).";

}  // namespace fp8kit::lab
