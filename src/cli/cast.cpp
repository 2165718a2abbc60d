// `fp8kit cast`: casts float32 values (or their bf16 roundings, as a bf16 tensor holds them) to FP8 and
// prints `<input> 0x<code> <decoded>`, one line each.
#include "base/error.h"
#include "cli/command.h"
#include "numerics/cast.h"
#include "numerics/format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace fp8kit::cli {
namespace {

// Parses a float32 as typed (decimal, hex float, inf, nan), rounding once (strtof, not via double).
float parse_value(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const float v = std::strtof(begin, &end);
  FP8KIT_CHECK(!text.empty() && end == begin + text.size(), "'{}' is not a number (try 1.5, -0.001, 1e-3, 0x1p-9, inf, nan)", text);
  return v;
}

std::string format_decoded(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", static_cast<double>(v));  // -0 prints as "-0"
  return buffer;
}

struct Options {
  std::string format = "e4m3";
  bool no_saturate = false;
  bool via_bf16 = false;
  std::vector<std::string> values;
  // CLI11 reads "-inf" / "-nan" as short options -i / -n with a value; these hidden options catch them
  // and parse_order() puts them back in place among the positional values.
  std::map<const CLI::Option*, char> dash_letter;
};

// The values in the order typed, whether CLI11 saw them as positionals or as "-i..." / "-n...".
std::vector<std::string> typed_values(const CLI::App& app, const Options& options, const CLI::Option* positional) {
  std::vector<std::string> values;
  std::map<const CLI::Option*, size_t> taken;
  for (const CLI::Option* opt : app.parse_order()) {
    const size_t k = taken[opt]++;
    if (opt == positional) {
      values.push_back(opt->results().at(k));
    } else if (auto it = options.dash_letter.find(opt); it != options.dash_letter.end()) {
      values.push_back(std::string("-") + it->second + opt->results().at(k));
    }
  }
  return values;
}

void run(const CLI::App& app, const Options& options, const CLI::Option* positional) {
  const Fp8Format format = parse_format(options.format);
  const Overflow overflow = options.no_saturate ? Overflow::NonSaturating : Overflow::Saturate;
  const std::vector<std::string> values = typed_values(app, options, positional);
  FP8KIT_CHECK(!values.empty(), "give at least one value to cast, e.g. `fp8kit cast --format e4m3 -- 1.0 -464 nan`");
  std::vector<float> parsed;
  for (const std::string& text : values) parsed.push_back(parse_value(text));  // all checked before printing
  for (size_t i = 0; i < values.size(); ++i) {
    std::string input = values[i];
    uint8_t code = 0;
    if (options.via_bf16) {
      const uint16_t h = float_to_bf16(parsed[i]);
      code = encode_fp8_from_bf16(h, format, overflow);
      input += " bf16 " + format_decoded(bf16_to_float(h));
    } else {
      code = encode_fp8(parsed[i], format, overflow);
    }
    std::printf("%s 0x%02X %s\n", input.c_str(), code, format_decoded(decode_fp8(code, format)).c_str());
  }
}

void setup(CLI::App& app) {
  auto options = std::make_shared<Options>();
  app.add_option("--format", options->format, "FP8 format: e4m3 (the \"fn\" variant) or e5m2")->capture_default_str();
  app.add_flag("--no-saturate", options->no_saturate,
               "overflow as ml_dtypes / PyTorch <= 2.11: NaN for e4m3, +-inf for e5m2 (default: clamp to +-max)");
  app.add_flag("--via-bf16", options->via_bf16,
               "round each value to bf16 first, as a bf16 tensor holds it, and print that value too: two roundings "
               "can differ from one (fp8kit cast --via-bf16 -- 1.062744140625)");
  CLI::Option* positional = app.add_option("values", options->values, "float32 values (negative ones are fine; `--` ends options)");
  for (char letter : {'i', 'n', 'I', 'N'}) {
    CLI::Option* opt = app.add_option(std::string("-") + letter, options->values)->group("")->allow_extra_args(false);
    options->dash_letter[opt] = letter;
  }
  app.footer(
      "Prints `<input> 0x<code> <decoded>` per value (`<input> bf16 <bf16 value> 0x<code> <decoded>` with\n"
      "--via-bf16), with round-to-nearest-even.\n"
      "Example: fp8kit cast --format e4m3 -- 464 1.0625 -inf nan");
  app.callback([&app, options, positional] { run(app, *options, positional); });
}

const bool registered = register_command({"cast", "Cast float32 values to FP8 and show the code and the value it decodes to", setup});

}  // namespace
}  // namespace fp8kit::cli
