// Self-contained HTML pages for reports (`fp8kit lab`, `fp8kit report`): inline CSS and SVG plots, no
// scripts and nothing fetched from the network, so a page opens anywhere and renders the same offline.
#pragma once

#include "report/csv.h"
#include "report/line_plot.h"

#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::report {

// Text as XML/HTML character data or attribute value (& < > " escaped).
std::string xml_escape(std::string_view text);

// How a callout reads: a plain remark, a healthy result, a warning, a problem.
enum class Tone { Info, Good, Warn, Bad };

// A page built top to bottom. Text arguments are plain text (escaped); level-2 headings also make
// the table of contents at the top.
class HtmlPage {
 public:
  explicit HtmlPage(std::string title);

  HtmlPage& heading(std::string_view text, int level = 2);  // level 2 or 3
  HtmlPage& paragraph(std::string_view text);
  HtmlPage& callout(std::string_view text, Tone tone);
  // A table of already-formatted cells; numeric-looking cells are right-aligned. Rows may carry a
  // tone each (row_tones empty, or one per row) to highlight them.
  HtmlPage& table(const CsvRow& header, const std::vector<CsvRow>& rows, std::string_view caption = {},
                  const std::vector<Tone>& row_tones = {});
  // The plot inline as SVG (its clip-path id made unique on the page).
  HtmlPage& plot(const LinePlot& plot, std::string_view caption = {});
  // A list of links to files beside the page (CSV files, say): {label, relative path}.
  HtmlPage& links(const std::vector<std::pair<std::string, std::string>>& items);

  std::string render() const;
  // Writes render() to `path` through a temporary file (no partial page on failure).
  void write(const std::string& path) const;

 private:
  std::string title_;
  std::string body_;
  std::vector<std::pair<std::string, std::string>> contents_;  // {anchor, heading}
  int plots_ = 0;
};

}  // namespace fp8kit::report
