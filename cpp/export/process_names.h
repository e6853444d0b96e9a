// cpp/export/process_names.h: how writers name a trace's processes (its process table or pid).
#pragma once

#include <string>

#include "framescope/trace_visitor.h"

namespace framescope::exporters {

/// The entry of `pid` in the trace's process table, or null.
inline const ProcessInfo* find_process(const TraceView& v, int64_t pid) {
  if (!v.processes) return nullptr;
  for (const ProcessInfo& p : *v.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

/// The name viewers show for `pid`: its entry's name, else "python <pid>" (not yet valid UTF-8:
/// writers repair it).
inline std::string process_display_name(const TraceView& v, int64_t pid) {
  const ProcessInfo* p = find_process(v, pid);
  if (p && !p->name.empty()) return p->name;
  return "python " + std::to_string(pid);
}

}  // namespace framescope::exporters
