// The formats table: FP8 columns from numerics/format.h, the 16-bit ones IEEE-style.
#include "lab/formats_table.h"

#include "numerics/format.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

namespace fp8kit::lab {
namespace {

struct Column {
  std::string name;
  int exponent_bits, mantissa_bits, bias;
  double max_finite, min_normal, min_subnormal;
  std::string infinity, nan;
};

Column fp8_column(Fp8Format format) {
  const FormatInfo& fi = info(format);
  return {std::string(fi.name), fi.exponent_bits, fi.mantissa_bits, fi.bias, fi.max_finite, fi.min_normal,
          fi.min_subnormal,
          fi.has_infinity ? "0x7C, 0xFC" : "none",
          format == Fp8Format::E4M3 ? "0x7F, 0xFF" : "0x7D-0x7F, 0xFD-0xFF"};
}

Column ieee_column(std::string name, int exponent_bits, int mantissa_bits, std::string infinity, std::string nan) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int max_exponent = bias;  // the all-ones exponent is reserved for inf/NaN
  return {std::move(name), exponent_bits, mantissa_bits, bias,
          std::ldexp(2.0 - std::ldexp(1.0, -mantissa_bits), max_exponent), std::ldexp(1.0, 1 - bias),
          std::ldexp(1.0, 1 - bias - mantissa_bits), std::move(infinity), std::move(nan)};
}

// "448", "0.015625 (2^-6)", "3.3895314e+38 (~2^128)".
std::string value(double v) {
  const int e = static_cast<int>(std::floor(std::log2(v)));
  if (std::ldexp(1.0, e) == v) return fmt::format("{:.8g} (2^{})", v, e);
  return fmt::format("{:.8g}", v);
}

}  // namespace

FormatsTable formats_table() {
  const std::vector<Column> columns{fp8_column(Fp8Format::E4M3), fp8_column(Fp8Format::E5M2),
                                    ieee_column("bf16", 8, 7, "0x7F80, 0xFF80", "exp all ones, mantissa != 0"),
                                    ieee_column("fp16", 5, 10, "0x7C00, 0xFC00", "exp all ones, mantissa != 0")};
  FormatsTable table;
  table.header.push_back("");
  for (const Column& c : columns) table.header.push_back(c.name);
  auto row = [&](std::string label, auto cell) {
    report::CsvRow cells{std::move(label)};
    for (const Column& c : columns) cells.push_back(cell(c));
    table.rows.push_back(std::move(cells));
  };
  row("bits (sign.exp.mantissa)", [](const Column& c) {
    return fmt::format("{} = 1.{}.{}", 1 + c.exponent_bits + c.mantissa_bits, c.exponent_bits, c.mantissa_bits);
  });
  row("exponent bias", [](const Column& c) { return fmt::format("{}", c.bias); });
  row("max finite", [](const Column& c) { return value(c.max_finite); });
  row("min normal", [](const Column& c) { return value(c.min_normal); });
  row("min subnormal", [](const Column& c) { return value(c.min_subnormal); });
  row("range, decades (max/min sub)",
      [](const Column& c) { return fmt::format("{:.2f}", std::log10(c.max_finite / c.min_subnormal)); });
  row("normal range, decades",
      [](const Column& c) { return fmt::format("{:.2f}", std::log10(c.max_finite / c.min_normal)); });
  row("values in [1, 2)", [](const Column& c) { return fmt::format("{}", 1 << c.mantissa_bits); });
  row("relative step (2^-mantissa)", [](const Column& c) { return value(std::ldexp(1.0, -c.mantissa_bits)); });
  row("infinity", [](const Column& c) { return c.infinity; });
  row("NaN", [](const Column& c) { return c.nan; });
  return table;
}

}  // namespace fp8kit::lab
