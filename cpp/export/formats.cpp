// cpp/export/formats.cpp: choosing a writer by format name or file extension.
#include <stdexcept>
#include <string>

#include "framescope/writers.h"

namespace framescope {

namespace {
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

void write_format(ExportFormat format, const TraceSource& source, OutputSink& out) {
  switch (format) {
    case ExportFormat::kChromeJson:
      return write_chrome_json(source, out);
    case ExportFormat::kPerfetto:
      return write_perfetto(source, out);
    case ExportFormat::kPstats:
      return write_pstats(source, out);
    case ExportFormat::kSpeedscope:
      return write_speedscope(source, out);
    case ExportFormat::kCollapsed:
      return write_collapsed(source, out);
  }
  throw std::invalid_argument("framescope: unknown export format");
}

ExportFormat format_for_path(std::string_view path) {
  std::string_view p = path;
  if (ends_with(p, ".gz")) p = p.substr(0, p.size() - 3);
  if (ends_with(p, ".speedscope.json")) return ExportFormat::kSpeedscope;
  if (ends_with(p, ".json")) return ExportFormat::kChromeJson;
  if (ends_with(p, ".pftrace") || ends_with(p, ".perfetto-trace")) return ExportFormat::kPerfetto;
  if (ends_with(p, ".prof") || ends_with(p, ".pstats")) return ExportFormat::kPstats;
  if (ends_with(p, ".collapsed") || ends_with(p, ".folded")) return ExportFormat::kCollapsed;
  throw std::invalid_argument(
      "framescope: cannot tell the format from '" + std::string(path) +
      "': use .json, .json.gz, .pftrace, .speedscope.json, .collapsed, .prof or .pstats "
      "(or give the format)");
}

ExportFormat parse_format(std::string_view name) {
  if (name == "chrome" || name == "json") return ExportFormat::kChromeJson;
  if (name == "perfetto" || name == "pftrace") return ExportFormat::kPerfetto;
  if (name == "pstats" || name == "prof") return ExportFormat::kPstats;
  if (name == "speedscope") return ExportFormat::kSpeedscope;
  if (name == "collapsed" || name == "folded") return ExportFormat::kCollapsed;
  throw std::invalid_argument("framescope: unknown format '" + std::string(name) +
                              "' (chrome, perfetto, pstats, speedscope or collapsed)");
}

}  // namespace framescope
