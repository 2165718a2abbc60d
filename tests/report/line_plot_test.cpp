// SVG line plots (report/line_plot.h): structure of the SVG, axes and ticks, broken lines.
#include "report/line_plot.h"

#include "base/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace fp8kit::report {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(LinePlot, LinearAxesTitleLegend) {
  LinePlot plot{.title = "Loss & <accuracy>", .x = {.label = "step"}, .y = {.label = "loss"}};
  plot.series.push_back({.label = "bf16", .x = {0, 1, 2, 3}, .y = {2.0, 1.5, 1.2, 1.1}});
  plot.series.push_back({.label = "fp8", .x = {0, 1, 2, 3}, .y = {2.0, 1.6, 1.3, 1.1}, .dashed = true});
  const std::string svg = render_svg(plot);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("Loss &amp; &lt;accuracy&gt;"), std::string::npos);  // escaped
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2u);  // the dashed series and its legend sample
  EXPECT_NE(svg.find(">bf16</text>"), std::string::npos);
  EXPECT_NE(svg.find(">fp8</text>"), std::string::npos);
  // Nice ticks: x 0..3 in steps of 0.5, y 1.1..2.0 in steps of 0.2 -> labels 1.0 .. 2.0.
  EXPECT_NE(svg.find(">0.5</text>"), std::string::npos);
  EXPECT_NE(svg.find(">1.0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">2.0</text>"), std::string::npos);
}

TEST(LinePlot, LogAxesSkipUnusablePoints) {
  LinePlot plot{.title = "t", .x = {.label = "x", .log = true}, .y = {.label = "y", .log = true}};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  plot.series.push_back({.label = "s", .x = {1e-3, 1e-2, 1e-1, 1, 10, 100}, .y = {1, 0.5, 0.0, 0.1, nan, 0.01}});
  const std::string svg = render_svg(plot);
  // The 0 and the NaN break the line into three runs: [1e-3, 1e-2], [1], [100].
  EXPECT_EQ(count(svg, "<polyline"), 3u);
  EXPECT_NE(svg.find("10<tspan dy=\"-6\" font-size=\"10\">-3</tspan>"), std::string::npos);  // decade labels
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
}

TEST(LinePlot, EmptyAndDegenerate) {
  EXPECT_NE(render_svg(LinePlot{.title = "empty"}).find("</svg>"), std::string::npos);
  LinePlot flat{.title = "flat"};
  flat.series.push_back({.label = "c", .x = {1, 2}, .y = {5, 5}});
  EXPECT_EQ(render_svg(flat).find("nan"), std::string::npos);
  LinePlot bad{.title = "bad"};
  bad.series.push_back({.label = "s", .x = {1, 2}, .y = {1}});
  EXPECT_THROW(render_svg(bad), Error);
}

}  // namespace
}  // namespace fp8kit::report
