// cpp/python/eval_frame_api.cpp: the eval_frame API (set_eval_frame, guarded code caches).
#include "frame_hook.h"
#include "tracer_api.h"

namespace framescope::py {

// Not written yet: no thread can set a callback, so the hook never calls this.
PyObject* eval_api_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  return run_frame(ts, frame, throwflag);
}

bool eval_frame_api_init(PyObject*) { return true; }

}  // namespace framescope::py
