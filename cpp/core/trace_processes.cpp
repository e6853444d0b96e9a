// cpp/core/trace_processes.cpp: the process table of a StoredTrace (names, labels, metadata).
#include <algorithm>
#include <map>
#include <set>

#include "framescope/stored_trace.h"

namespace framescope {

StoredTrace StoredTrace::with_process(ProcessInfo info) const {
  StoredTrace out(*this);
  auto it = std::find_if(out.processes_.begin(), out.processes_.end(),
                         [&](const ProcessInfo& p) { return p.pid == info.pid; });
  if (it != out.processes_.end()) {
    *it = std::move(info);
  } else {
    out.processes_.push_back(std::move(info));
  }
  return out;
}

namespace internal {

void separate_pids(const StoredTrace& mine, const StoredTrace& theirs,
                   std::vector<ThreadInfo>& threads, size_t first,
                   std::vector<ProcessInfo>& processes) {
  // Pids and tids of different hosts are unrelated numbers: the same number in two ranks'
  // traces names two processes (or threads), and viewers that key threads by tid (Perfetto)
  // would join them. A clashing number of `theirs` moves above every number either trace uses,
  // the same way wherever it occurs (a main thread's tid is its pid), so it also stays apart
  // from what later merges compare against (the merged trace).
  std::set<int64_t> used;
  for (const ThreadInfo& t : mine.threads()) used.insert({t.pid, int64_t(t.os_tid)});
  for (const ProcessInfo& p : mine.processes()) used.insert(p.pid);
  int64_t next = used.empty() ? 0 : *used.rbegin();
  for (const ThreadInfo& t : theirs.threads()) next = std::max({next, t.pid, int64_t(t.os_tid)});
  for (const ProcessInfo& p : theirs.processes()) next = std::max(next, p.pid);
  std::map<int64_t, int64_t> remap;  // their number -> new number
  auto renumber = [&](int64_t n) {
    if (!used.count(n)) return n;
    auto it = remap.find(n);
    if (it == remap.end()) it = remap.emplace(n, ++next).first;
    return it->second;
  };
  for (size_t i = first; i < threads.size(); ++i) {
    threads[i].pid = renumber(threads[i].pid);
    threads[i].os_tid = uint64_t(renumber(int64_t(threads[i].os_tid)));
  }
  for (ProcessInfo& p : processes) p.pid = renumber(p.pid);
}

}  // namespace internal
}  // namespace framescope
