// cpp/python/bindings/bindings_analysis.cpp: nanobind bindings of the analyses (key averages).
#include <nanobind/nanobind.h>

#include <memory>
#include <vector>
#include "bindings/trace_handle.h"

#include "framescope/key_averages.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

// Names may hold invalid UTF-8 (C ABI, merged blobs): decoded with replacement, never failing.
nb::object text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");  // new
  if (!o) throw nb::python_error();
  return nb::steal(o);
}

nb::object optional_ns(int64_t ns) { return ns < 0 ? nb::none() : nb::object(nb::int_(ns)); }

}  // namespace

void bind_analysis(nb::module_& m) {
  m.def(
      "_with_filter",
      [](const PyTrace& t, int64_t min_duration_ns, uint32_t max_depth) {
        if (min_duration_ns < 0) throw nb::value_error("min_duration_ns must be >= 0");
        ReplayFilter f;
        f.min_duration_ns = min_duration_ns;
        f.max_depth = max_depth;
        PyTrace out;
        out.state->stored = std::make_shared<const StoredTrace>(t.state->current()->with_filter(f));
        out.state->backend = t.state->backend;
        return out;
      },
      "trace"_a, "min_duration_ns"_a = 0, "max_depth"_a = 0,
      "The same trace read without slices shorter than min_duration_ns or deeper than max_depth "
      "Python frames (0: no limit).");
  m.def(
      "_with_host",
      [](const PyTrace& t, nb::bytes classes, bool fold, bool drop) {
        ReplayFilter f = t.state->current()->filter();
        auto c = std::make_shared<std::vector<uint8_t>>(classes.size());
        const auto* p = static_cast<const uint8_t*>(classes.data());
        for (size_t i = 0; i < classes.size(); ++i) {
          if (p[i] > 2) throw nb::value_error("symbol classes are 0, 1 or 2");
          (*c)[i] = p[i];
        }
        f.symbol_classes = std::move(c);
        f.host_mode = drop   ? ReplayFilter::HostMode::kDrop
                      : fold ? ReplayFilter::HostMode::kFold
                             : ReplayFilter::HostMode::kMark;
        PyTrace out;
        out.state->stored = std::make_shared<const StoredTrace>(t.state->current()->with_filter(f));
        out.state->backend = t.state->backend;
        return out;
      },
      "trace"_a, "classes"_a, "fold"_a, "drop"_a = false,
      "The same trace with host code marked (category 'host' in traces), with fold every host "
      "frame named '[host]', with drop host frames left out (what they enclose kept); classes: "
      "one byte per symbol (0 the program's, 1 host, 2 as its caller).");
  m.def(
      "_key_averages",
      [](const PyTrace& t, bool group_by_input_shape, uint32_t group_by_stack_n,
         bool group_by_thread, bool merge_nested_same_name) {
        auto stored = t.state->current();
        KeyAverageOptions options;
        options.group_by_input_shape = group_by_input_shape;
        options.group_by_stack_n = group_by_stack_n;
        options.group_by_thread = group_by_thread;
        options.merge_nested_same_name = merge_nested_same_name;
        KeyAverages result;
        {
          nb::gil_scoped_release release;
          result = compute_key_averages(*stored, options);
        }
        const std::vector<Symbol>& symbols = stored->symbols();
        std::vector<nb::object> names(symbols.size());
        auto name = [&](uint32_t s) -> nb::object {
          if (s >= symbols.size()) return text("<?>");
          if (!names[s].is_valid()) names[s] = text(symbols[s].name);
          return names[s];
        };
        nb::list entries;
        for (const KeyAverage& k : result.entries) {
          nb::list stack;
          for (uint32_t s : k.stack) stack.append(name(s));
          const Symbol* sym = k.symbol < symbols.size() ? &symbols[k.symbol] : nullptr;
          entries.append(nb::make_tuple(
              name(k.symbol), category_name(k.category),
              k.thread < 0 ? nb::none() : nb::object(nb::int_(k.thread)), text(k.input_shapes),
              stack, k.count, k.total_ns, k.self_ns, optional_ns(k.cpu_total_ns),
              optional_ns(k.cpu_self_ns), k.memory_total, k.memory_self, k.flops, k.is_async,
              k.top_level, text(sym ? sym->file : std::string()), sym ? sym->line : 0));
        }
        nb::list threads;
        for (const ThreadTotals& th : result.threads) {
          threads.append(nb::make_tuple(
              th.self_ns, th.cpu_known ? nb::object(nb::int_(th.cpu_self_ns)) : nb::none()));
        }
        return nb::make_tuple(entries, threads, result.has_cpu, result.has_memory);
      },
      "trace"_a, "group_by_input_shape"_a = false, "group_by_stack_n"_a = 0,
      "group_by_thread"_a = false, "merge_nested_same_name"_a = false,
      "Per-key totals of one replay: (entries, per-thread totals, has_cpu, has_memory).");
}

}  // namespace framescope::py
