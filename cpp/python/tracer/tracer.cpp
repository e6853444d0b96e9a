// cpp/python/tracer/tracer.cpp: tracer sessions: code registration, names, labels, backend switch.
#include "tracer/tracer.h"

#include <algorithm>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "py_text.h"
#include "tracer/code_filter.h"
#include "tracer/frame_hook.h"
#include "tracer/initial_frames.h"
#include "tracer/inline_frames.h"
#include "tracer/thread_names.h"

#if FS_PY311 && !FS_PY312
#include <opcode.h>  // JUMP_BACKWARD_NO_INTERRUPT
#endif

namespace framescope::py {

TracerState g_tracer;

namespace {

// A labelled call's key: its class (or, per instance, the instance: `index` is then the
// instance's number among its class's instances in the session, as torch numbers nn.Modules).
struct LabelKey {
  PyObject* object;  // strong: the class, or the instance
  const char* label;
  int64_t index;  // -1: per class
};

// Labels whose calls are named per instance ("nn.Module: Linear_0"), for the process.
std::unordered_set<const char*>* g_per_instance_labels = new std::unordered_set<const char*>();

// What one session holds on to. Code objects and labelled classes (or instances) are kept alive
// until the trace is replayed, so a key (an address) can never be reused by another object
// meanwhile.
struct TracerSession {
  TracerOptions options;
  CodeFilter filter;
  std::vector<PyObject*> codes;                      // strong
  std::unordered_map<uint64_t, LabelKey> labels;     // key -> label
  std::unordered_map<PyObject*, int64_t> instances;  // class -> instances numbered so far
  std::string backend;
  bool fallback_running = false;
};
TracerSession* g_session = nullptr;

const char* backend_name(TracerBackend b) {
  switch (b) {
    case TracerBackend::kFrameHook:
      return "frame_hook";
    case TracerBackend::kMonitoring:
      return "sys.monitoring";
    case TracerBackend::kSetProfile:
      return "setprofile";
    default:
      return "none";
  }
}

TracerBackend fallback_backend() {
  return FS_PY312 ? TracerBackend::kMonitoring : TracerBackend::kSetProfile;
}

// First argument of a frame that has not started running (self of a method call). Borrowed.
// First argument of a frame (self of a method call), also when a closure captures it: then
// the frame holds it in a cell. Borrowed; null when there is none.
PyObject* first_argument(PyCodeObject* code, FsFrame* frame) {
  if (!frame || code->co_argcount < 1) return nullptr;
#if FS_PY311
  // 3.11+: the argument's own slot becomes a cell when the frame runs MAKE_CELL, its first
  // instruction (so after the hook saw it, before the fallbacks' events).
  constexpr char kFastCell = 0x40;  // CO_FAST_CELL of internal/pycore_code.h, 3.11-3.13
  PyObject* first = frame->localsplus[0];
  if (first && PyCell_Check(first) &&
      (PyBytes_AS_STRING(code->co_localspluskinds)[0] & kFastCell)) {
    first = PyCell_GET(first);
  }
  return first;
#else
  // 3.10: the frame's setup moves a captured argument into its cell and clears the slot.
  PyObject* first = frame->f_localsplus[0];
  if (!first && code->co_cell2arg) {
    const Py_ssize_t cells = PyTuple_GET_SIZE(code->co_cellvars);
    for (Py_ssize_t i = 0; i < cells; ++i) {
      if (code->co_cell2arg[i] != 0) continue;
      PyObject* cell = frame->f_localsplus[code->co_nlocals + i];
      if (cell && PyCell_Check(cell)) first = PyCell_GET(cell);
      break;
    }
  }
  return first;
#endif
}

std::string unicode_to_string(PyObject* s) {
  if (!s || !PyUnicode_Check(s)) return "<?>";
  return utf8_of(s);  // U+FFFD for lone surrogates (undecodable bytes of a file name)
}

std::string prune_path(const std::string& file) {
  if (!g_session) return file;
  for (const std::string& prefix : g_session->options.prune_prefixes) {
    if (!prefix.empty() && file.size() > prefix.size() &&
        file.compare(0, prefix.size(), prefix) == 0) {
      size_t start = prefix.size();
      while (start < file.size() && file[start] == '/') ++start;
      return file.substr(start);
    }
  }
  return file;
}

bool resolve_python_key(uint64_t key, Symbol& out) {
  if (!g_session) return false;
  if (key & 1) {
    auto it = g_session->labels.find(key);
    if (it == g_session->labels.end()) return false;
    const LabelKey& l = it->second;
    auto* type = l.index < 0 ? reinterpret_cast<PyTypeObject*>(l.object) : Py_TYPE(l.object);
    std::string cls = type->tp_name;
    size_t dot = cls.rfind('.');
    if (dot != std::string::npos) cls = cls.substr(dot + 1);
    out.name = std::string(l.label) + ": " + cls;
    if (l.index >= 0) out.name += "_" + std::to_string(l.index);
    out.function = out.name;
    return true;
  }
  auto* code = reinterpret_cast<PyCodeObject*>(key);
  std::string file = unicode_to_string(code->co_filename);
#if FS_PY311
  std::string qualname = unicode_to_string(code->co_qualname);
#else
  std::string qualname = unicode_to_string(code->co_name);
#endif
  out.file = file;
  out.line = code->co_firstlineno;
  out.function = unicode_to_string(code->co_name);
  out.name = prune_path(file) + "(" + std::to_string(code->co_firstlineno) + "): " + qualname;
  return true;
}

}  // namespace

#if FS_PY311
constexpr int kGeneratorCodeFlags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;
#endif

#if FS_PY311 && !FS_PY312
// 3.11 reports a generator's resume to profile and trace functions when it executes the RESUME
// after its `yield` (or after RETURN_GENERATOR, POP_TOP for its first run). A generator whose
// `yield from` / `await` delegate handled a throw() and returned is resumed after its SEND loop
// instead: genobject.c moves the frame to the loop's last instruction, the
// JUMP_BACKWARD_NO_INTERRUPT back to the SEND, which a frame never suspends at otherwise (it
// suspends at a YIELD_VALUE). No call event then, yet a return event at its next yield or
// return: CPython's hooks see no slice there (docs/tracing.md), so the frame hook records none.
bool resume_is_reported(const FsFrame* f) {
  return _Py_OPCODE(*f->prev_instr) != JUMP_BACKWARD_NO_INTERRUPT;
}
#endif

uint64_t register_code(PyCodeObject* code, FsFrame* frame, int hook_throwflag) {
  (void)hook_throwflag;  // (3.11 only)
  if (!g_session) return 0;
  if (FRAMESCOPE_UNLIKELY(reinterpret_cast<PyObject*>(code) == g_thread_bootstrap_code)) {
    thread_names_note_started(first_argument(code, frame));  // a Thread starts running
  }
  CodeExtra* extra = get_or_create_code_extra(code);
  if (!extra) {
    PyErr_Clear();
    return 0;
  }
  if (extra->traced_epoch == (g_tracer.epoch | kSkippedEpochBit)) return 0;
  if (extra->traced_epoch != g_tracer.epoch) {
    if (!g_session->filter.records(code)) {
      // Left out: the hook chains its frames at once from now on (left_out_code()). Not
      // Thread._bootstrap's: each of its calls must come here to note a thread's start.
      if (reinterpret_cast<PyObject*>(code) != g_thread_bootstrap_code) {
        extra->traced_epoch = g_tracer.epoch | kSkippedEpochBit;
        extra->compact_call_bits = 0;
        extra->compact_epoch = kNoCompactEpoch;
      }
      return 0;
    }
    g_session->codes.push_back(reinterpret_cast<PyObject*>(code));
    Py_INCREF(code);
    extra->traced_epoch = g_tracer.epoch;
    const uint32_t index =
        internal::register_compact_key(g_tracer.epoch, reinterpret_cast<uint64_t>(code));
    extra->compact_call_bits =
        index == internal::kNoCompactIndex ? 0 : internal::compact_call_bits(index);
#if FS_PY311
    if (code->co_flags & kGeneratorCodeFlags) {
      extra->tracer_slow_path = true;
    }
#endif
#if FS_PY313
    // A class body (or exec() code) comes here at each run: its namespace is watched then.
    if (!(code->co_flags & CO_OPTIMIZED) && g_tracer.backend == TracerBackend::kFrameHook) {
      extra->tracer_slow_path = true;
    }
#endif
    extra->compact_epoch =
        extra->compact_call_bits && !extra->tracer_slow_path ? g_tracer.epoch : kNoCompactEpoch;
    if (g_tracer.backend == TracerBackend::kFrameHook) inline_frames_code_registered(code, frame);
  }
#if FS_PY313
  if (frame && !(code->co_flags & CO_OPTIMIZED) && g_tracer.backend == TracerBackend::kFrameHook) {
    inline_frames_class_body_started(frame);
  }
#endif
#if FS_PY311
  // On 3.11+ calling a generator function evaluates its frame through the hook once, to run
  // RETURN_GENERATOR (3.10 builds the generator without evaluating). That call only creates the
  // generator; the profile shows its resumes, as the fallbacks and torch do.
  if (frame && (code->co_flags & kGeneratorCodeFlags) && !frame_is_resumed(frame)) {
    return 0;
  }
#endif
#if FS_PY311 && !FS_PY312
  // (a throw() into the frame is reported whatever the instruction: TRACE_FUNCTION_THROW_ENTRY)
  if (frame && hook_throwflag == 0 && (code->co_flags & kGeneratorCodeFlags) &&
      !resume_is_reported(frame)) {
    return 0;
  }
#endif
  if (extra->call_label) {
    if (PyObject* self = first_argument(code, frame)) {
      PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(self));
      const bool per_instance = g_per_instance_labels->count(extra->call_label) != 0;
      PyObject* object = per_instance ? self : type;
      uint64_t key = reinterpret_cast<uint64_t>(object) | 1;
      if (g_session->labels.find(key) == g_session->labels.end()) {
        // (held until the session ends: an instance's number names it in the whole trace)
        const int64_t index = per_instance ? g_session->instances[type]++ : -1;
        if (per_instance && index == 0) Py_INCREF(type);  // (instances' key, until the end)
        Py_INCREF(object);
        g_session->labels.emplace(key, LabelKey{object, extra->call_label, index});
      }
      return key;
    }
  }
  return reinterpret_cast<uint64_t>(code);
}

bool skipped_code_slow(PyCodeObject* code) {
  if (!g_session) return false;
  const CodeExtra* extra = find_code_extra(code);
  if (!extra || (extra->traced_epoch & ~kSkippedEpochBit) != g_tracer.epoch) {
    register_code(code, nullptr);  // classifies it (a code seen first at its return or C call)
    extra = find_code_extra(code);
  }
  return extra && extra->traced_epoch == (g_tracer.epoch | kSkippedEpochBit);
}

bool tracer_label_calls(PyObject* code, const std::string& label, bool per_instance) {
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "framescope: expected a code object");
    return false;
  }
  if (!init_code_extra()) return false;
  CodeExtra* extra = get_or_create_code_extra(reinterpret_cast<PyCodeObject*>(code));
  if (!extra) return false;
  // Labels live for the process: code objects may outlive any session. A label has one copy
  // per class and one per instance (its address tells which), so that labelling one code per
  // instance leaves other codes with the same label per class.
  static std::deque<std::string>* labels = new std::deque<std::string>();
  for (const std::string& l : *labels) {
    if (l == label && (g_per_instance_labels->count(l.c_str()) != 0) == per_instance) {
      extra->call_label = l.c_str();
      extra->tracer_slow_path = true;
      extra->compact_epoch = kNoCompactEpoch;
      return true;
    }
  }
  labels->push_back(label);
  if (per_instance) g_per_instance_labels->insert(labels->back().c_str());
  extra->call_label = labels->back().c_str();
  extra->tracer_slow_path = true;
  extra->compact_epoch = kNoCompactEpoch;
  return true;
}

bool tracer_start(const TracerOptions& options, PyObject* native_ids,
                  const std::string& skip_prefix) {
  if (g_session) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: the Python tracer is already running");
    return false;
  }
  if (!init_code_extra()) return false;
  uint64_t epoch = internal::g_session_epoch.load();
  if (epoch == 0) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: no profiling session is enabled");
    return false;
  }
  if (options.backend == TracerBackend::kMonitoring && !FS_PY312) {
    PyErr_SetString(PyExc_ValueError, "framescope: the sys.monitoring backend needs Python 3.12+");
    return false;
  }
  if (options.backend == TracerBackend::kSetProfile && FS_PY312) {
    PyErr_SetString(PyExc_ValueError,
                    "framescope: on Python 3.12+ the fallback backend is sys.monitoring");
    return false;
  }
  g_session = new TracerSession();
  g_session->options = options;
  g_session->filter.skip_prefixes = options.skip_prefixes;
  g_session->filter.skip_files = options.skip_files;
  g_session->filter.include_globs = options.include_globs;
  g_session->filter.exclude_globs = options.exclude_globs;
  std::sort(g_session->options.prune_prefixes.begin(), g_session->options.prune_prefixes.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  g_tracer.epoch = epoch;
  g_tracer.backend = options.backend;
  const bool hook_backend = options.backend == TracerBackend::kFrameHook;
  // The frame hook cannot see frames end that it did not see start: sys.monitoring watches a
  // few code objects for it (3.12+). Without a free tool id, anchors remain (initial_frames.h).
  bool watch = hook_backend;
#if FS_PY312
  if (watch && !monitoring_watch_start()) {
    PyErr_Clear();
    watch = false;
    internal::add_session_warning(
        "framescope: no sys.monitoring tool id is free: frames running at the start end at their "
        "thread's next Python call rather than when they return" +
        std::string(FS_PY313 ? ", and __init__ calls that specialized Cls(...) sites make "
                               "without the frame hook are missing"
                             : ""));
  }
  if (watch) g_session->fallback_running = true;
  if (watch && !inline_frames_start()) {
    tracer_release();
    return false;
  }
#endif
  if (options.backend != TracerBackend::kNone &&
      !initial_frames_start(native_ids, hook_backend ? skip_prefix : std::string(), watch)) {
    tracer_release();
    return false;
  }
  if (hook_backend) {
    if (options.c_calls && !fallback_start(false, true)) {
      tracer_release();
      return false;
    }
    g_session->fallback_running = g_session->fallback_running || options.c_calls;
    g_tracer.hook_epoch = epoch;
    hook_acquire(kHookUserTracer);
  } else if (options.backend != TracerBackend::kNone) {
    if (!fallback_start(true, options.c_calls)) {
      tracer_release();
      return false;
    }
    g_session->fallback_running = true;
    // 3.10 recurses in C for every Python call, hook or not, so a deep recursion that plain
    // 3.10 survives could run out of stack with the profile function's frames added. The hook,
    // recording nothing, moves such recursion onto stack segments as it does for the frame-hook
    // backend; not when another tool owns the hook (often the reason for the fallback).
    if (!FS_PY311 && foreign_frame_hook().empty()) hook_acquire(kHookUserStackGuard);
  }
  g_session->backend = backend_name(options.backend);
  return true;
}

bool tracer_switch_to_fallback(const char* reason) {
  if (!g_session || !hook_records_frames()) return false;
  if (hook_users() != kHookUserTracer) return false;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  bool ok = fallback_start(true, g_session->options.c_calls);
  if (!ok) PyErr_Clear();
  PyErr_Restore(type, value, tb);
  if (!ok) return false;
  g_session->fallback_running = true;
  g_tracer.hook_epoch = kNoHookEpoch;
  g_tracer.switched_to_fallback = true;
  hook_detach_for_tracer();
  g_tracer.backend = fallback_backend();
  g_session->backend = std::string("frame_hook->") + backend_name(fallback_backend());
  internal::add_session_warning(std::string("framescope: switched from the frame hook to ") +
                                backend_name(fallback_backend()) + " (" + reason +
                                "); later frames are recorded at the fallback's overhead");
  return true;
}

void tracer_stop() {
  if (!g_session) return;
  if (hook_records_frames() && (hook_users() & kHookUserTracer) && !hook_is_current()) {
    // Another tool set its own PEP 523 function during the session and did not chain to ours:
    // Python calls from then on were not seen. Its hook stays (hook_release leaves it alone).
    internal::add_session_warning(
        "framescope: another tool replaced the PEP 523 frame hook during the session; Python "
        "calls after that were not recorded (use backend='fallback' to profile alongside it)");
  }
  g_tracer.hook_epoch = kNoHookEpoch;
  initial_frames_stop();
  inline_frames_stop();
  if (g_session->fallback_running) {
    fallback_stop();
    g_session->fallback_running = false;
  }
  hook_release(kHookUserTracer);
  hook_release(kHookUserStackGuard);
  g_tracer.backend = TracerBackend::kNone;
}

KeyResolver tracer_resolver() {
  KeyResolver r;
  r.python = resolve_python_key;
  r.c_function = resolve_c_function;
  return r;
}

void tracer_release() {
  if (!g_session) return;
  tracer_stop();
  for (PyObject* code : g_session->codes) Py_DECREF(code);
  for (auto& kv : g_session->labels) Py_DECREF(kv.second.object);
  for (auto& kv : g_session->instances) Py_DECREF(kv.first);
  fallback_release();
  delete g_session;
  g_session = nullptr;
  g_tracer = TracerState{};
}

std::string tracer_backend_description() { return g_session ? g_session->backend : "none"; }

}  // namespace framescope::py
