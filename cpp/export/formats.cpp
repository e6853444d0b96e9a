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

namespace {
constexpr FormatNames kFormats[] = {
    {ExportFormat::kChromeJson, "chrome", ".json", {".json", ""}, "json"},
    {ExportFormat::kPerfetto, "perfetto", ".pftrace", {".pftrace", ".perfetto-trace"}, "pftrace"},
    {ExportFormat::kPstats, "pstats", ".prof", {".prof", ".pstats"}, "prof"},
    {ExportFormat::kSpeedscope, "speedscope", ".speedscope.json", {".speedscope.json", ""}, ""},
    {ExportFormat::kCollapsed, "collapsed", ".collapsed", {".collapsed", ".folded"}, "folded"},
};
}  // namespace

const FormatNames* export_formats(size_t* count) {
  *count = sizeof(kFormats) / sizeof(kFormats[0]);
  return kFormats;
}

ExportFormat format_for_path(std::string_view path) {
  std::string_view p = path;
  if (ends_with(p, ".gz")) p = p.substr(0, p.size() - 3);
  const FormatNames* best = nullptr;
  size_t best_length = 0;
  std::string endings;
  for (const FormatNames& f : kFormats) {
    for (std::string_view suffix : f.suffixes) {
      if (suffix.empty()) continue;
      endings += (endings.empty() ? "" : ", ") + std::string(suffix);
      if (suffix.size() > best_length && ends_with(p, suffix)) {
        best = &f;
        best_length = suffix.size();
      }
    }
  }
  if (best != nullptr) return best->format;
  throw std::invalid_argument("framescope: cannot tell the format from '" + std::string(path) +
                              "': use " + endings + " (each may end in .gz), or give the format");
}

ExportFormat parse_format(std::string_view name) {
  std::string names;
  for (const FormatNames& f : kFormats) {
    if (name == f.name || (!f.alias.empty() && name == f.alias)) return f.format;
    names += (names.empty() ? "" : ", ") + std::string(f.name);
  }
  throw std::invalid_argument("framescope: unknown format '" + std::string(name) + "' (" + names +
                              ")");
}

}  // namespace framescope
