// HTML pages (report/html.h): escaping, table of contents, tables, unique inline plots, atomic write.
#include "report/html.h"

#include "base/error.h"
#include "common/read_text.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace fp8kit::report {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(HtmlPage, EscapesTextAndBuildsContents) {
  HtmlPage page("Lab <1> & co");
  page.heading("Part 1").paragraph("a < b & \"c\"").heading("Detail", 3).heading("Part 2").callout("bad!", Tone::Bad);
  const std::string html = page.render();
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<title>Lab &lt;1&gt; &amp; co</title>"), std::string::npos);
  EXPECT_NE(html.find("<p>a &lt; b &amp; &quot;c&quot;</p>"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"#s1\">Part 1</a>"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"#s2\">Part 2</a>"), std::string::npos);
  EXPECT_EQ(count(html, "<h3>"), 1u);
  EXPECT_NE(html.find("class=\"callout bad\""), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg\""), std::string::npos);  // no plot, no SVG
}

TEST(HtmlPage, TablesAlignNumbersAndCheckWidths) {
  HtmlPage page("t");
  page.table({"name", "ms"}, {{"bf16", "1.25"}, {"fp8", "0.8"}}, "speed", {Tone::Info, Tone::Good});
  const std::string html = page.render();
  EXPECT_NE(html.find("<caption>speed</caption>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">1.25</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>bf16</td>"), std::string::npos);
  EXPECT_EQ(count(html, "<tr class=\"good\">"), 1u);
  EXPECT_THROW(page.table({"a", "b"}, {{"1"}}), Error);
  EXPECT_THROW(page.table({"a"}, {{"1"}}, "", {Tone::Good, Tone::Bad}), Error);
}

TEST(HtmlPage, PlotsGetUniqueClipIds) {
  LinePlot plot{.title = "loss"};
  plot.series.push_back({.label = "bf16", .x = {0, 1}, .y = {1, 2}});
  HtmlPage page("t");
  page.plot(plot, "first").plot(plot);
  const std::string html = page.render();
  EXPECT_EQ(count(html, "<svg"), 2u);
  EXPECT_EQ(count(html, "clipPath id=\"plot1\""), 1u);
  EXPECT_EQ(count(html, "clipPath id=\"plot2\""), 1u);
  EXPECT_EQ(count(html, "url(#plot2)"), 1u);
  EXPECT_NE(html.find("<figcaption>first</figcaption>"), std::string::npos);
}

TEST(HtmlPage, WritesTheWholePage) {
  const auto dir = std::filesystem::temp_directory_path() / "fp8kit_html_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "page.html").string();
  HtmlPage page("t");
  page.links({{"data", "a.csv"}});
  page.write(path);
  const std::string text = testing::read_text(path);
  EXPECT_EQ(text, page.render());
  EXPECT_NE(text.find("<a href=\"a.csv\">data</a>"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8kit::report
