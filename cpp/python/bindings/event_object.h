// cpp/python/bindings/event_object.h: framescope._core.Event, one event as a small CPython object.
//
// A plain CPython type rather than a nanobind class: iterating a trace creates one per event, and
// a nanobind instance costs a registration in nanobind's instance map on creation and its
// removal on destruction, which is most of the time per event. This one is a fixed-size object
// with read-only member slots and a free list.
#pragma once

#include <Python.h>

#include <cstdint>

#include "framescope/trace.h"

namespace framescope::py {

/// The values of one event.
struct EventValues {
  uint64_t index = 0;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;  ///< -1 for instants
  int64_t parent = -1;
  uint32_t symbol = 0;
  uint32_t thread = 0;
  uint32_t depth = 0;
  EventCategory category = EventCategory::kOther;
  bool open_at_stop = false;
};

/// Creates the Event type and adds it to `module` as "Event". False with a Python error set.
bool event_type_init(PyObject* module);

/// A new Event (new reference; null with a Python error set). `names` is a tuple of the
/// trace's symbol names as str (borrowed; the event keeps a reference): `name` is
/// names[symbol], and two events are equal when they share `names` and their index.
PyObject* new_event(PyObject* names, const EventValues& values) noexcept;

}  // namespace framescope::py
