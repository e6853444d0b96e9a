// cpp/python/tracer/initial_frames.cpp: frames already running when a session starts: open slices
// from the start, and the moment each of them ends.
#include "tracer/initial_frames.h"

#include "tracer/initial_frames_api.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/session.h"
#include "thread_identity.h"
#include "tracer/tracer.h"

namespace framescope::py {

namespace {

// Frames still open from the start, per thread (innermost last), for the threads whose ends are
// watched. A frame leaves its list when it ends; a thread leaves the map with its last frame
// (so a later thread state at the same address is never mistaken for it). GIL-protected.
std::unordered_map<PyThreadState*, std::vector<const void*>> g_open;
bool g_watching = false;
// The innermost frame from the start of each thread that has had no Python event yet.
std::unordered_map<PyThreadState*, const void*> g_innermost;
// Frames still running from the start, per thread (innermost last), every backend: for the
// setprofile backend to tell their returns (initial_frame_returned). GIL-protected.
std::unordered_map<PyThreadState*, std::vector<const void*>> g_running;

#if !FS_PY312
uint64_t g_watch_epoch = 0;  // session whose watch is installed (0: none)

// The watch's profile function: only returns matter. Installed while no hooked frame runs on the
// thread (initial_watch_pause), so it sees the returns of frames from the start, the C calls
// those frames make, and nothing else.
int watch_profile(PyObject*, PyFrameObject* frame, int what, PyObject*) {
  if (what == PyTrace_RETURN) {
#if FS_PY311
    initial_frame_ended(PyThreadState_Get(), frame->f_frame);
#else
    initial_frame_ended(PyThreadState_Get(), frame);
#endif
  }
  return 0;
}

void unwatch_thread(PyThreadState* ts) {
  if (ts->c_profilefunc == watch_profile && _PyEval_SetProfile(ts, nullptr, nullptr) < 0) {
    PyErr_Clear();
  }
}
#endif

uint64_t native_id_of(PyObject* native_ids, PyThreadState* ts) {
#if FS_PY311
  (void)native_ids;
  return ts->native_thread_id;
#else
  // The caller's own id from the kernel: threading keeps a forked child's parent's id.
  if (ts == PyThreadState_Get()) return internal::os_thread_id();
  if (!native_ids || !PyDict_Check(native_ids)) return 0;
  PyObject* key = PyLong_FromUnsignedLong(ts->thread_id);  // new
  if (!key) {
    PyErr_Clear();
    return 0;
  }
  PyObject* value = PyDict_GetItemWithError(native_ids, key);  // borrowed
  Py_DECREF(key);
  uint64_t id = value ? PyLong_AsUnsignedLongLong(value) : 0;
  if (PyErr_Occurred()) {
    PyErr_Clear();
    id = 0;
  }
  return id;
#endif
}

bool file_starts_with(PyCodeObject* code, const std::string& prefix) {
  Py_ssize_t n = 0;
  const char* file = PyUnicode_AsUTF8AndSize(code->co_filename, &n);
  if (!file) {
    PyErr_Clear();
    return false;
  }
  return size_t(n) >= prefix.size() && prefix.compare(0, prefix.size(), file, prefix.size()) == 0;
}

// The thread's Python frames, outermost first, each as (code, frame address). New references
// to the codes.
std::vector<std::pair<PyCodeObject*, const void*>> frames_of(PyThreadState* ts) {
  std::vector<std::pair<PyCodeObject*, const void*>> frames;  // innermost first while walking
  PyFrameObject* f = PyThreadState_GetFrame(ts);              // new
  while (f) {
    frames.emplace_back(PyFrame_GetCode(f), frame_object_address(f));  // new code
    PyFrameObject* back = PyFrame_GetBack(f);                          // new
    Py_DECREF(f);
    f = back;
  }
  return {frames.rbegin(), frames.rend()};
}

}  // namespace

bool initial_frames_start(PyObject* native_ids, const std::string& skip_prefix, bool watch) {
  initial_frames_stop();
  PyThreadState* me = PyThreadState_Get();
  std::unordered_set<PyCodeObject*> watched_codes;
  bool ok = true;
  for (PyThreadState* ts = PyInterpreterState_ThreadHead(me->interp); ts;
       ts = PyThreadState_Next(ts)) {
    auto frames = frames_of(ts);
    if (ts == me && !skip_prefix.empty()) {
      while (!frames.empty() && file_starts_with(frames.back().first, skip_prefix)) {
        Py_DECREF(frames.back().first);
        frames.pop_back();
      }
    }
    InitialStack stack;
    stack.pthread_id = ts->thread_id;
    stack.os_tid = native_id_of(native_ids, ts);
    std::vector<const void*> addresses;
    for (auto& [code, address] : frames) {
      const uint64_t key = ok ? register_code(code, nullptr) : 0;
      if (key) {
        stack.keys.push_back(key);
        stack.frame_addresses.push_back(reinterpret_cast<uint64_t>(address));
        addresses.push_back(address);
        if (watch) watched_codes.insert(code);
      }
      Py_DECREF(code);
    }
    if (stack.keys.empty()) continue;
    g_innermost.emplace(ts, addresses.back());
    internal::add_initial_stack(std::move(stack));
    g_running.emplace(ts, addresses);
    if (watch) g_open.emplace(ts, std::move(addresses));
  }
  if (!watch || g_open.empty()) {
    g_open.clear();
    return true;
  }
#if FS_PY312
  // Only these code objects get the events: every other frame keeps running uninstrumented.
  g_watching = monitoring_watch_start();
  for (PyCodeObject* code : watched_codes) {
    if (g_watching && !monitoring_watch_code(code, kWatchEnds)) g_watching = false;
  }
  if (!g_watching) {
    PyErr_Clear();  // anchors close the frames instead (see initial_frames.h)
    g_open.clear();
  }
#else
  // A thread whose profile slot another tool uses keeps it: anchors close its frames instead.
  for (auto it = g_open.begin(); it != g_open.end();) {
    PyThreadState* ts = it->first;
    if (ts->c_profilefunc == nullptr && _PyEval_SetProfile(ts, watch_profile, nullptr) == 0) {
      ++it;
    } else {
      PyErr_Clear();
      it = g_open.erase(it);
    }
  }
  g_watching = !g_open.empty();
  g_watch_epoch = g_watching ? internal::g_session_epoch.load() : 0;
#endif
  return true;
}

void initial_frames_stop() {
#if !FS_PY312
  for (auto& entry : g_open) unwatch_thread(entry.first);
  g_watch_epoch = 0;
#endif
  g_open.clear();
  g_innermost.clear();
  g_running.clear();
  g_watching = false;
}

void initial_frames_after_fork_child() noexcept {
  PyThreadState* me = PyThreadState_Get();
  for (auto it = g_open.begin(); it != g_open.end();)
    it = it->first == me ? ++it : g_open.erase(it);
  for (auto it = g_innermost.begin(); it != g_innermost.end();) {
    it = it->first == me ? ++it : g_innermost.erase(it);
  }
  for (auto it = g_running.begin(); it != g_running.end();) {
    it = it->first == me ? ++it : g_running.erase(it);
  }
}

bool initial_frame_returned(PyThreadState* ts, const void* frame) {
  auto it = g_running.find(ts);
  if (it == g_running.end()) return false;
  std::vector<const void*>& frames = it->second;
  size_t i = frames.size();
  while (i-- > 0 && frames[i] != frame) {
  }
  if (i >= frames.size()) return false;
  frames.resize(i);
  if (frames.empty()) g_running.erase(it);  // (a later thread state at its address is another)
  return true;
}

bool initial_frame_restarted(PyThreadState* ts, const void* frame) {
  auto it = g_innermost.find(ts);
  if (it == g_innermost.end()) return false;
  const bool same = it->second == frame;
  g_innermost.erase(it);
  return same;
}

void initial_frames_first_event(PyThreadState* ts) { g_innermost.erase(ts); }

bool initial_frames_watched() { return g_watching; }

void initial_frame_ended(PyThreadState* ts, const void* frame) {
  if (g_open.empty()) return;
  auto it = g_open.find(ts);
  if (it == g_open.end()) return;
  std::vector<const void*>& frames = it->second;
  // The innermost first: a frame from the start can end only once those above it ended.
  size_t i = frames.size();
  while (i-- > 0 && frames[i] != frame) {
  }
  if (i >= frames.size()) return;
  frames.resize(i);
  if (internal::ThreadBuffer* buffer = internal::current_buffer()) {
    buffer->append(now_ticks(), internal::pack_word(internal::EventKind::kPyInitialExit,
                                                    reinterpret_cast<uint64_t>(frame)));
  }
  if (frames.empty()) {
#if !FS_PY312
    unwatch_thread(ts);
#endif
    g_open.erase(it);
  }
}

#if !FS_PY312
bool initial_watch_pause(PyThreadState* ts) {
  if (ts->c_profilefunc != watch_profile) return false;
  set_profile_function_raw(ts, nullptr);
  return true;
}

bool is_initial_watch_function(Py_tracefunc func) { return func == watch_profile; }

void initial_watch_resume(PyThreadState* ts) {
  // Not once the session stopped (the watch is gone) or the thread's frames all ended.
  if (g_watch_epoch == 0 || g_watch_epoch != internal::g_session_epoch.load() ||
      ts->c_profilefunc != nullptr || g_open.find(ts) == g_open.end()) {
    return;
  }
  set_profile_function_raw(ts, watch_profile);
}
#endif

}  // namespace framescope::py
