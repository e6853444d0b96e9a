// cpp/python/bindings/bindings_events.cpp: a trace's events for Python: Event objects, a thin
// iterator (a replay in steps), searches, and random access through an index built on first use.
//
// Iterating millions of events must neither materialize the trace (48 bytes per event) nor go
// through Python-level dataclasses. An iterator drives a ReplayCursor a few thousand slots at a
// time into a batch of Slices and turns each into an Event (a small C++ object) as it is read.
// Events come in index order (by start, thread after thread) but a slice's duration is known
// only at its end, which may be the whole trace away (the main module's frame): so the first
// iteration of a trace records every event's duration in one replay (8 bytes per event, kept
// with the trace) and iterators read it from there.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <new>

#include "bindings/arg_checks.h"
#include "bindings/event_object.h"
#include "bindings/trace_handle.h"
#include "py_text.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

// Durations by event index (the bit kOpenAtStopBit marks a slice still open at the stop).
constexpr int64_t kOpenAtStopBit = int64_t(1) << 62;

// Records at each event's begin (index order) and fills in slices at their end: one replay.
class DurationRecorder final : public TraceVisitor {
 public:
  explicit DurationRecorder(std::vector<int64_t>& out) : out_(out) {}
  void slice_begin(const Slice& s) override { set(s.index, 0); }
  void slice_end(const Slice& s) override {
    if (s.index < out_.size()) {
      out_[size_t(s.index)] = s.dur_ns | (s.open_at_stop ? kOpenAtStopBit : 0);
    }
  }
  void instant(const Slice& s) override { set(s.index, -1); }
  void async_slice(const Slice& s) override { set(s.index, s.dur_ns); }

 private:
  void set(uint64_t i, int64_t v) {
    if (i == out_.size()) out_.push_back(v);
  }
  std::vector<int64_t>& out_;
};

std::shared_ptr<const std::vector<int64_t>> durations_of(TraceState& st) {
  return st.built_once(&TraceState::durations, [](const StoredTrace& stored) {
    auto durations = std::make_shared<std::vector<int64_t>>();
    durations->reserve(size_t(stored.event_count()));  // counted once per trace, then cached
    DurationRecorder recorder(*durations);
    stored.visit(recorder);
    return std::shared_ptr<const std::vector<int64_t>>(std::move(durations));
  });
}

// What every Event of one trace state shares: the trace (identity, symbols) and its names as
// str objects, made once.
}  // namespace

struct EventContext {
  std::shared_ptr<const StoredTrace> stored;
  nb::object names;  // tuple of str, shared by the events (their identity: see new_event)
};

namespace {

// Under the GIL only (it holds Python objects).
std::shared_ptr<EventContext> context_of(PyTrace& t) {
  auto stored = t.state->current();
  std::shared_ptr<EventContext>& cached = t.events_context;
  if (cached && cached->stored == stored) return cached;
  auto ctx = std::make_shared<EventContext>();
  ctx->stored = stored;
  const auto& symbols = stored->symbols();
  PyObject* names = PyTuple_New(Py_ssize_t(symbols.size()));  // new
  if (!names) throw nb::python_error();
  ctx->names = nb::steal(names);
  for (size_t i = 0; i < symbols.size(); ++i) {
    PyTuple_SET_ITEM(names, Py_ssize_t(i), py_str(symbols[i].name).release().ptr());
  }
  cached = ctx;
  return ctx;
}

nb::object make_event(const EventContext& ctx, const Slice& s, int64_t dur) {
  EventValues v;
  v.index = s.index;
  v.start_ns = s.start_ns;
  v.dur_ns = dur < 0 ? dur : (dur & ~kOpenAtStopBit);
  v.parent = s.parent;
  v.symbol = s.symbol;
  v.thread = s.thread;
  v.depth = s.depth;
  v.category = s.category;
  v.open_at_stop = dur >= 0 && (dur & kOpenAtStopBit) != 0;
  PyObject* e = new_event(ctx.names.ptr(), v);  // new
  if (!e) throw nb::python_error();
  return nb::steal(e);
}

nb::object make_event(const EventContext& ctx, const Trace& index, size_t i) {
  const TraceEvent& e = index.events[i];
  Slice s;
  s.index = i;
  s.start_ns = e.start_ns;
  s.parent = e.parent;
  s.symbol = e.symbol;
  s.thread = e.thread;
  s.depth = e.depth;
  s.category = e.category;
  const int64_t dur = e.dur_ns < 0 ? e.dur_ns : e.dur_ns | (e.open_at_stop ? kOpenAtStopBit : 0);
  return make_event(ctx, s, dur);
}

// Collects the events a replay begins within [start, stop), in index order.
class BatchVisitor final : public TraceVisitor {
 public:
  BatchVisitor(uint64_t start, uint64_t stop) : start_(start), stop_(stop) {}
  void slice_begin(const Slice& s) override { add(s); }
  void instant(const Slice& s) override { add(s); }
  void async_slice(const Slice& s) override { add(s); }
  std::vector<Slice> batch;
  bool past_stop = false;

 private:
  void add(const Slice& s) {
    if (s.index >= stop_) {
      past_stop = true;
    } else if (s.index >= start_) {
      batch.push_back(s);
    }
  }
  uint64_t start_, stop_;
};

// The iterator's state, heap-allocated (the cursor refers to the visitor and the trace).
struct IterState {
  std::shared_ptr<EventContext> ctx;
  std::shared_ptr<const std::vector<int64_t>> durations;
  BatchVisitor visitor;
  ReplayCursor cursor;
  size_t pos = 0;
  bool done = false;
  IterState(std::shared_ptr<EventContext> c, std::shared_ptr<const std::vector<int64_t>> d,
            uint64_t start, uint64_t stop)
      : ctx(std::move(c)),
        durations(std::move(d)),
        visitor(start, stop),
        cursor(*ctx->stored, visitor) {}
};

struct EventIterator {
  std::unique_ptr<IterState> state;
};

constexpr uint64_t kBatchSlots = 4096;

PyObject* event_iter_next(PyObject* self) noexcept {
  try {
    IterState& it = *nb::inst_ptr<EventIterator>(self)->state;
    if (it.pos == it.visitor.batch.size()) {
      it.visitor.batch.clear();
      it.pos = 0;
      while (!it.done && it.visitor.batch.empty()) {
        it.done = !it.cursor.advance(kBatchSlots) || it.visitor.past_stop;
      }
      if (it.visitor.batch.empty()) return nullptr;  // StopIteration
    }
    const Slice& s = it.visitor.batch[it.pos++];
    const std::vector<int64_t>& d = *it.durations;
    const int64_t dur = s.index < d.size() ? d[size_t(s.index)] : s.dur_ns;
    return make_event(*it.ctx, s, dur).release().ptr();
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const OutputError& e) {  // the loaded file changed on disk (an OSError, as elsewhere)
    set_output_error(e);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyObject* event_iter_self(PyObject* self) noexcept {
  Py_INCREF(self);
  return self;
}

PyType_Slot g_iterator_slots[] = {{Py_tp_iter, reinterpret_cast<void*>(event_iter_self)},
                                  {Py_tp_iternext, reinterpret_cast<void*>(event_iter_next)},
                                  {0, nullptr}};

// Events with one of `symbols` (a replay collecting them; durations set at their end).
class SymbolCollector final : public TraceVisitor {
 public:
  explicit SymbolCollector(std::vector<char> match) : match_(std::move(match)) {}
  void slice_begin(const Slice& s) override {
    if (matches(s)) found.push_back(s);
  }
  void slice_end(const Slice& s) override {
    if (!matches(s)) return;
    auto it = std::lower_bound(found.begin(), found.end(), s.index,
                               [](const Slice& a, uint64_t i) { return a.index < i; });
    if (it != found.end() && it->index == s.index) *it = s;
  }
  void instant(const Slice& s) override {
    if (matches(s)) found.push_back(s);
  }
  void async_slice(const Slice& s) override {
    if (matches(s)) found.push_back(s);
  }
  std::vector<Slice> found;

 private:
  bool matches(const Slice& s) const { return s.symbol < match_.size() && match_[s.symbol]; }
  std::vector<char> match_;
};

// The direct children of event `parent` (a replay that stops once the parent has ended).
class ChildCollector final : public TraceVisitor {
 public:
  struct Done {};
  explicit ChildCollector(uint64_t parent) : parent_(parent) {}
  void slice_begin(const Slice& s) override {
    if (s.parent == int64_t(parent_)) found.push_back(s);
  }
  void slice_end(const Slice& s) override {
    if (s.index == parent_) throw Done{};
    if (s.parent != int64_t(parent_)) return;
    for (size_t i = found.size(); i-- > 0;) {
      if (found[i].index == s.index) {
        found[i] = s;
        break;
      }
    }
  }
  void instant(const Slice& s) override {
    if (s.parent == int64_t(parent_)) found.push_back(s);
  }
  void async_slice(const Slice& s) override {
    if (s.parent == int64_t(parent_)) found.push_back(s);
  }
  std::vector<Slice> found;

 private:
  uint64_t parent_;
};

nb::list events_of(const std::shared_ptr<EventContext>& ctx, const std::vector<Slice>& slices) {
  nb::list out;
  for (const Slice& s : slices) {
    const int64_t dur = s.dur_ns < 0 ? -1 : s.dur_ns | (s.open_at_stop ? kOpenAtStopBit : 0);
    out.append(make_event(*ctx, s, dur));
  }
  return out;
}

std::vector<char> symbols_named(const StoredTrace& st, const std::string& name) {
  std::vector<char> match(st.symbols().size(), 0);
  for (size_t i = 0; i < st.symbols().size(); ++i) match[i] = st.symbols()[i].name == name;
  return match;
}

nb::tuple event_tuple(const Trace& t, size_t i) {
  if (i >= t.events.size()) throw nb::index_error("event index out of range");
  const TraceEvent& e = t.events[i];
  return nb::make_tuple(py_str(t.symbols[e.symbol].name), category_name(e.category), e.thread,
                        e.start_ns, e.dur_ns, e.parent, e.depth, e.symbol, int(e.category));
}

}  // namespace

void bind_events(nb::module_& m, nb::class_<PyTrace>& trace) {
  if (!event_type_init(m.ptr())) throw nb::python_error();

  nb::class_<EventIterator>(m, "_EventIterator", nb::type_slots(g_iterator_slots));

  trace
      .def(
          "iter_events",
          [](PyTrace& t, nb::handle start_arg, nb::handle stop_arg) {
            uint64_t start = bound_arg(start_arg, "iter_events()", "start", UINT64_MAX);
            uint64_t stop = stop_arg.is_none()
                                ? UINT64_MAX
                                : bound_arg(stop_arg, "iter_events()", "stop", UINT64_MAX);
            auto ctx = context_of(t);
            auto durations = durations_of(*t.state);
            stop = std::min<uint64_t>(stop, durations->size());
            return EventIterator{
                std::make_unique<IterState>(ctx, durations, std::min(start, stop), stop)};
          },
          "start"_a = 0, "stop"_a.none() = nb::none(),
          "Events with index in [start, stop), in index order, read by a replay as they are "
          "iterated.")
      .def(
          "event_object",
          [](PyTrace& t, nb::handle i_arg) {
            auto index = index_of(*t.state);
            const uint64_t i =
                index_arg(i_arg, "event_object()", "i", index->events.size(), "events");
            return make_event(*context_of(t), *index, i);
          },
          "i"_a.none())
      .def(
          "event",
          [](const PyTrace& t, nb::handle i) {
            auto index = index_of(*t.state);
            return event_tuple(*index,
                               index_arg(i, "event()", "i", index->events.size(), "events"));
          },
          "i"_a.none())
      .def(
          "find",
          [](PyTrace& t, nb::handle name) {
            auto st = t.state->current();
            std::vector<char> match = symbols_named(*st, text_arg(name, "find()", "name"));
            std::vector<uint64_t> out;
            if (std::find(match.begin(), match.end(), 1) == match.end()) return out;
            nb::gil_scoped_release release;
            SymbolCollector c(std::move(match));
            st->visit(c);
            for (const Slice& s : c.found) out.push_back(s.index);
            return out;
          },
          "name"_a.none(), "Indices of the events with this exact name.")
      .def(
          "find_events",
          [](PyTrace& t, nb::handle name) {
            auto ctx = context_of(t);
            std::vector<char> match =
                symbols_named(*ctx->stored, text_arg(name, "find_events()", "name"));
            SymbolCollector c(std::move(match));
            {
              nb::gil_scoped_release release;
              ctx->stored->visit(c);
            }
            return events_of(ctx, c.found);
          },
          "name"_a.none(), "The events with this exact name, in index order.")
      .def(
          "children",
          [](PyTrace& t, nb::handle parent_arg) {
            auto ctx = context_of(t);
            uint64_t count = 0;
            {
              nb::gil_scoped_release release;
              count = ctx->stored->event_count();
            }
            ChildCollector c(index_arg(parent_arg, "children()", "parent", count, "events"));
            {
              nb::gil_scoped_release release;
              try {
                ctx->stored->visit(c);
              } catch (const ChildCollector::Done&) {
              }
            }
            return events_of(ctx, c.found);
          },
          "parent"_a.none(),
          "The direct children of the event with index `parent`, in index order.");
}

}  // namespace framescope::py
