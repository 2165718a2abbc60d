// The HTML page writer: a fixed stylesheet, sections appended as they come, a table of contents.
#include "report/html.h"

#include "base/error.h"

#include <fmt/format.h>

#include <cctype>

namespace fp8kit::report {
namespace {

constexpr std::string_view kStyle = R"(
body { font-family: "DejaVu Sans", Arial, sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #bbb; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
caption { caption-side: top; text-align: left; font-weight: bold; padding-bottom: .3em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.good td { background: #e8f5e9; } tr.warn td { background: #fff8e1; } tr.bad td { background: #ffebee; }
.callout { border-left: 5px solid; padding: .5em .9em; margin: 1em 0; }
.callout.info { border-color: #1f77b4; background: #eef5fb; } .callout.good { border-color: #2ca02c; background: #e8f5e9; }
.callout.warn { border-color: #e6a100; background: #fff8e1; } .callout.bad { border-color: #d62728; background: #ffebee; }
figure { margin: 1em 0; } figcaption { font-size: 14px; color: #555; }
svg { max-width: 100%; height: auto; }
nav ul { columns: 2; }
)";

const char* tone_class(Tone tone) {
  switch (tone) {
    case Tone::Good: return "good";
    case Tone::Warn: return "warn";
    case Tone::Bad: return "bad";
    case Tone::Info: break;
  }
  return "info";
}

// "1.25", "-3e-05", "97.1%", "1.6x": right-aligned in tables.
bool numeric(std::string_view cell) {
  if (cell.empty()) return false;
  bool digit = false;
  for (char c : cell) {
    if (std::isdigit(static_cast<unsigned char>(c))) digit = true;
    else if (std::string_view("+-.eE%x ,").find(c) == std::string_view::npos) return false;
  }
  return digit;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

HtmlPage::HtmlPage(std::string title) : title_(std::move(title)) {}

HtmlPage& HtmlPage::heading(std::string_view text, int level) {
  FP8KIT_CHECK(level == 2 || level == 3, "HtmlPage::heading: level {} (use 2 or 3)", level);
  const std::string anchor = fmt::format("s{}", contents_.size() + 1);
  if (level == 2) {
    contents_.emplace_back(anchor, std::string(text));
    body_ += fmt::format("<h2 id=\"{}\">{}</h2>\n", anchor, xml_escape(text));
  } else {
    body_ += fmt::format("<h3>{}</h3>\n", xml_escape(text));
  }
  return *this;
}

HtmlPage& HtmlPage::paragraph(std::string_view text) {
  body_ += fmt::format("<p>{}</p>\n", xml_escape(text));
  return *this;
}

HtmlPage& HtmlPage::callout(std::string_view text, Tone tone) {
  body_ += fmt::format("<div class=\"callout {}\">{}</div>\n", tone_class(tone), xml_escape(text));
  return *this;
}

HtmlPage& HtmlPage::table(const CsvRow& header, const std::vector<CsvRow>& rows, std::string_view caption,
                          const std::vector<Tone>& row_tones) {
  FP8KIT_CHECK(row_tones.empty() || row_tones.size() == rows.size(),
               "HtmlPage::table: {} row tones for {} rows (give one per row, or none)", row_tones.size(), rows.size());
  body_ += "<table>\n";
  if (!caption.empty()) body_ += fmt::format("<caption>{}</caption>\n", xml_escape(caption));
  body_ += "<tr>";
  for (const std::string& h : header) body_ += fmt::format("<th>{}</th>", xml_escape(h));
  body_ += "</tr>\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    FP8KIT_CHECK(rows[r].size() == header.size(), "HtmlPage::table: row {} has {} cells but the header has {}", r,
                 rows[r].size(), header.size());
    const bool toned = !row_tones.empty() && row_tones[r] != Tone::Info;
    body_ += toned ? fmt::format("<tr class=\"{}\">", tone_class(row_tones[r])) : std::string("<tr>");
    for (const std::string& cell : rows[r])
      body_ += (numeric(cell) ? "<td class=\"num\">" : "<td>") + xml_escape(cell) + "</td>";
    body_ += "</tr>\n";
  }
  body_ += "</table>\n";
  return *this;
}

HtmlPage& HtmlPage::plot(const LinePlot& plot, std::string_view caption) {
  LinePlot unique = plot;
  unique.id = fmt::format("plot{}", ++plots_);
  body_ += "<figure>\n" + render_svg(unique);
  if (!caption.empty()) body_ += fmt::format("<figcaption>{}</figcaption>\n", xml_escape(caption));
  body_ += "</figure>\n";
  return *this;
}

HtmlPage& HtmlPage::links(const std::vector<std::pair<std::string, std::string>>& items) {
  body_ += "<ul>\n";
  for (const auto& [label, href] : items)
    body_ += fmt::format("<li><a href=\"{}\">{}</a></li>\n", xml_escape(href), xml_escape(label));
  body_ += "</ul>\n";
  return *this;
}

std::string HtmlPage::render() const {
  std::string page = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{0}</title>\n"
      "<style>{1}</style>\n</head>\n<body>\n<h1>{0}</h1>\n",
      xml_escape(title_), kStyle);
  if (contents_.size() > 1) {
    page += "<nav><ul>\n";
    for (const auto& [anchor, text] : contents_)
      page += fmt::format("<li><a href=\"#{}\">{}</a></li>\n", anchor, xml_escape(text));
    page += "</ul></nav>\n";
  }
  return page + body_ + "</body>\n</html>\n";
}

void HtmlPage::write(const std::string& path) const { write_file_atomically(path, render()); }

}  // namespace fp8kit::report
