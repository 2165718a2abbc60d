// SVG line plots: scales with "nice" ticks (1-2-5 steps, or decades on log axes), clipped polylines,
// a legend beside the plot area.
#include "report/line_plot.h"

#include "base/error.h"
#include "report/csv.h"
#include "report/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace fp8kit::report {
namespace {

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr double kCharWidth = 7.2;  // average glyph width at font-size 13, for layout

bool usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0.0); }

struct Tick {
  double value;
  std::string label;  // SVG text content (may hold a <tspan>); empty for a minor tick
};

// An axis's mapping from data to [0, 1] and its ticks.
struct Scale {
  bool log = false;
  double lo = 0.0, hi = 1.0;  // in data units, or log10 of them
  std::vector<Tick> ticks;

  double fraction(double v) const { return ((log ? std::log10(v) : v) - lo) / (hi - lo); }
};

double nice_step(double rough) {
  const double e = std::pow(10.0, std::floor(std::log10(rough)));
  const double f = rough / e;
  return (f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0) * e;
}

std::string linear_label(double v, double step) {
  if (std::fabs(v) < step * 1e-9) v = 0.0;  // no "-0" or 1e-17 from rounding
  if (std::fabs(v) >= 1e6 || step < 1e-4) return fmt::format("{:g}", v);
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return fmt::format("{:.{}f}", v, decimals);
}

std::string decade_label(int k) {
  if (k >= 0 && k <= 3) return fmt::format("{}", static_cast<int>(std::pow(10.0, k)));
  return fmt::format("10<tspan dy=\"-6\" font-size=\"10\">{}</tspan>", k);
}

Scale make_scale(const PlotAxis& axis, std::vector<double> values) {
  Scale s;
  s.log = axis.log;
  if (axis.log) {
    for (double& v : values) v = std::log10(v);
  }
  double lo = values.empty() ? 0.0 : *std::min_element(values.begin(), values.end());
  double hi = values.empty() ? 1.0 : *std::max_element(values.begin(), values.end());
  if (axis.min && usable(*axis.min, axis.log)) lo = axis.log ? std::log10(*axis.min) : *axis.min;
  if (axis.max && usable(*axis.max, axis.log)) hi = axis.log ? std::log10(*axis.max) : *axis.max;
  if (hi <= lo) {
    const double pad = axis.log ? 0.5 : (lo == 0.0 ? 1.0 : std::fabs(lo) * 0.1);
    lo -= pad, hi += pad;
  }
  if (axis.log) {
    if (!axis.min) lo = std::floor(lo);
    if (!axis.max) hi = std::ceil(hi);
    const int first = static_cast<int>(std::ceil(lo - 1e-9)), last = static_cast<int>(std::floor(hi + 1e-9));
    const int decades = last - first;
    const int every = std::max(1, (decades + 7) / 8);
    for (int k = first; k <= last; ++k) {
      if ((k - first) % every == 0) s.ticks.push_back({static_cast<double>(k), decade_label(k)});
    }
    if (hi - lo <= 6.0) {  // minor ticks at 2..9 x 10^k
      for (int k = first - 1; k <= last; ++k) {
        for (int m = 2; m <= 9; ++m) {
          const double v = k + std::log10(static_cast<double>(m));
          if (v > lo && v < hi) s.ticks.push_back({v, ""});
        }
      }
    }
    if (s.ticks.empty() || hi - lo < 1.0) {  // less than a decade shown: label the ends
      s.ticks.push_back({lo, fmt::format("{:.3g}", std::pow(10.0, lo))});
      s.ticks.push_back({hi, fmt::format("{:.3g}", std::pow(10.0, hi))});
    }
  } else {
    const double step = nice_step((hi - lo) / 6.0);
    if (!axis.min) lo = std::floor(lo / step + 1e-9) * step;
    if (!axis.max) hi = std::ceil(hi / step - 1e-9) * step;
    const auto first = static_cast<int64_t>(std::ceil(lo / step - 1e-9)), last = static_cast<int64_t>(std::floor(hi / step + 1e-9));
    for (int64_t i = first; i <= last; ++i) s.ticks.push_back({static_cast<double>(i) * step, linear_label(static_cast<double>(i) * step, step)});
  }
  s.lo = lo, s.hi = hi;
  return s;
}

}  // namespace

std::string render_svg(const LinePlot& plot, int width, int height) {
  std::vector<double> xs, ys;
  for (const PlotSeries& s : plot.series) {
    FP8KIT_CHECK(s.x.size() == s.y.size(), "plot '{}': series '{}' has {} x values but {} y values", plot.title,
                 s.label, s.x.size(), s.y.size());
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (usable(s.x[i], plot.x.log) && usable(s.y[i], plot.y.log)) xs.push_back(s.x[i]), ys.push_back(s.y[i]);
    }
  }
  const Scale sx = make_scale(plot.x, xs), sy = make_scale(plot.y, ys);

  size_t longest = 0;
  for (const PlotSeries& s : plot.series) longest = std::max(longest, s.label.size());
  const double left = 84, top = 48, bottom = 62;
  const double right = plot.series.empty() ? 24.0 : 60.0 + static_cast<double>(longest) * kCharWidth;
  const double x0 = left, x1 = width - right, y0 = top, y1 = height - bottom;
  auto px = [&](double v) { return x0 + sx.fraction(v) * (x1 - x0); };
  auto py = [&](double v) { return y1 - sy.fraction(v) * (y1 - y0); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"13\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<defs><clipPath id=\"{6}\"><rect x=\"{2:.1f}\" y=\"{3:.1f}\" width=\"{4:.1f}\" height=\"{5:.1f}\"/></clipPath></defs>\n",
      width, height, x0, y0, x1 - x0, y1 - y0, plot.id);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
                     (x0 + x1) / 2, xml_escape(plot.title));

  // Grid and ticks: major ticks get a grid line and a label, minor ones a short mark and a faint line.
  for (const Tick& t : sx.ticks) {
    const double x = x0 + (t.value - sx.lo) / (sx.hi - sx.lo) * (x1 - x0);
    const bool major = !t.label.empty();
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\"/>\n", x, y0, y1,
                       major ? "#dddddd" : "#f2f2f2");
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n", x, y1,
                       y1 + (major ? 6 : 3));
    if (major) svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x, y1 + 21, t.label);
  }
  for (const Tick& t : sy.ticks) {
    const double y = y1 - (t.value - sy.lo) / (sy.hi - sy.lo) * (y1 - y0);
    const bool major = !t.label.empty();
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\"/>\n", x0, y, x1,
                       major ? "#dddddd" : "#f2f2f2");
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"black\"/>\n",
                       x0 - (major ? 6 : 3), y, x0);
    if (major) svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", x0 - 9, y + 4.5, t.label);
  }
  svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"black\"/>\n",
                     x0, y0, x1 - x0, y1 - y0);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", (x0 + x1) / 2, height - 16.0,
                     xml_escape(plot.x.label));
  svg += fmt::format("<text transform=\"translate(20 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     (y0 + y1) / 2, xml_escape(plot.y.label));

  // Series: one polyline per unbroken run of usable points; legend entries beside the plot.
  for (size_t k = 0; k < plot.series.size(); ++k) {
    const PlotSeries& s = plot.series[k];
    const std::string color = s.color.empty() ? kPalette[k % std::size(kPalette)] : s.color;
    const std::string style = fmt::format("fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-linejoin=\"round\" stroke-linecap=\"round\"{}",
                                          color, s.dashed ? " stroke-dasharray=\"7 4\"" : "");
    std::string points;
    size_t count = 0;
    auto flush = [&] {
      if (count == 1) points += points;  // a lone point: a zero-length line, drawn as a dot by the round cap
      if (count > 0) svg += fmt::format("<polyline clip-path=\"url(#{})\" {} points=\"{}\"/>\n", plot.id, style, points.substr(1));
      points.clear(), count = 0;
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], plot.x.log) || !usable(s.y[i], plot.y.log)) {
        flush();
        continue;
      }
      points += fmt::format(" {:.2f},{:.2f}", px(s.x[i]), py(s.y[i]));
      ++count;
    }
    flush();
    const double ly = y0 + 12 + 22.0 * static_cast<double>(k);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" {}/>\n", x1 + 14, ly, x1 + 42, ly, style);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", x1 + 48, ly + 4.5, xml_escape(s.label));
  }
  svg += "</svg>\n";
  return svg;
}

void write_svg(const LinePlot& plot, const std::string& path) { write_file_atomically(path, render_svg(plot)); }

}  // namespace fp8kit::report
