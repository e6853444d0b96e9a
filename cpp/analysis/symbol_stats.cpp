// cpp/analysis/symbol_stats.cpp: per-symbol calls, inclusive and self time: key_averages'
// accounting summed per symbol.
#include <algorithm>

#include "framescope/key_averages.h"
#include "saturating.h"

namespace framescope {

using internal::sat_add;

std::vector<SymbolStats> compute_stats(const TraceSource& source, size_t symbol_count) {
  // key_averages' accounting, summed per symbol: one definition of self and total time for
  // every output (each instant is the innermost open slice's; async spans have no self time;
  // recursion counts once in the total).
  const KeyAverages averages = compute_key_averages(source);
  std::vector<SymbolStats> by_symbol(symbol_count);
  for (size_t i = 0; i < symbol_count; ++i) by_symbol[i].symbol = uint32_t(i);
  for (const KeyAverage& k : averages.entries) {
    if (k.symbol >= symbol_count) continue;
    SymbolStats& st = by_symbol[k.symbol];
    st.calls += k.count;
    st.total_ns = sat_add(st.total_ns, k.total_ns);
    st.self_ns = sat_add(st.self_ns, k.self_ns);
  }
  std::vector<SymbolStats> out;
  for (const SymbolStats& st : by_symbol) {
    if (st.calls) out.push_back(st);
  }
  std::sort(out.begin(), out.end(),
            [](const SymbolStats& a, const SymbolStats& b) { return a.self_ns > b.self_ns; });
  return out;
}

}  // namespace framescope
