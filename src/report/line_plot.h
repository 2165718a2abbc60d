// SVG line plots for reports (`fp8kit quant-error --out`, training curves): axes with linear or log
// scales, ticks, grid, legend, title. Plain data in, a self-contained SVG file out.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fp8kit::report {

struct PlotSeries {
  std::string label{};
  std::vector<double> x{}, y{};  // same length; non-finite points (and <= 0 on a log axis) break the line
  bool dashed = false;
  std::string color{};           // CSS colour; empty picks the next of a 10-colour palette
};

struct PlotAxis {
  std::string label{};
  bool log = false;
  std::optional<double> min{}, max{};  // default: the data's range (log axes: whole decades)
};

struct LinePlot {
  std::string title{};
  PlotAxis x{}, y{};
  std::vector<PlotSeries> series{};
  std::string id = "area";  // the SVG's clip-path id: unique per plot when several share an HTML page
};

std::string render_svg(const LinePlot& plot, int width = 880, int height = 520);
// Writes render_svg(plot) to `path` (through a temporary file, so a failure leaves no partial file).
void write_svg(const LinePlot& plot, const std::string& path);

}  // namespace fp8kit::report
