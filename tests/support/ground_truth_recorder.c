/* tests/support/ground_truth_recorder.c: the differential tests' ground truth, recorded with CPython's
 * own hooks and nothing of framescope's.
 *
 * 3.12+: sys.monitoring (PY_START, PY_RESUME, PY_THROW open a Python slice; PY_RETURN, PY_YIELD,
 * PY_UNWIND close it; CALL of anything but a Python function opens a C slice, C_RETURN and
 * C_RAISE close it). 3.10/3.11: a C function in every thread's trace slot (PyTrace_CALL opens,
 * PyTrace_RETURN closes), or in the profile slot when C calls are wanted (PyTrace_C_CALL opens,
 * PyTrace_C_RETURN / PyTrace_C_EXCEPTION close). The trace slot leaves the profile slot to the
 * recorder under test, so that both can record one run; the profile slot cannot be shared.
 * Threads started during the recording get the function before their first Python frame:
 * `threading._start_new_thread` and `_thread.start_new_thread` are wrapped while it runs.
 *
 * Callbacks allocate no Python objects (an allocation could start a garbage collection and run
 * finalizers inside the callback, changing the program): an event keeps a strong reference to
 * a code object, a module, a type or a method descriptor, which do not own program data. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define GT_PY312 (PY_VERSION_HEX >= 0x030C0000)

enum { EV_PY_OPEN = 0, EV_PY_CLOSE = 1, EV_C_OPEN = 2, EV_C_CLOSE = 3 };
/* What a C slice called: how its `obj` and `name` are to be read. */
enum {
    C_FUNCTION = 0, /* builtin function: obj = module (or None), name = function name */
    C_METHOD = 1,   /* builtin method bound to obj = type of the receiver (or the type itself) */
    C_DESCR = 2,    /* method descriptor: obj = the type that defines it */
    C_TYPE = 3,     /* a type called: obj = the type */
    C_INSTANCE = 4, /* an instance called: obj = its type */
    C_OWN = 5,      /* framescope's own builtin (is_framescope_own): not the program's call */
};

typedef struct {
    int64_t ts_ns;
    long tid;
    int kind;
    int ckind;
    PyObject *obj; /* strong */
    const char *name;
    const void *method; /* C_METHOD: the PyMethodDef called */
} Event;

static Event *g_events = NULL;
static size_t g_count = 0, g_cap = 0;
static int g_running = 0;
static int g_c_calls = 0;
static int g_overflow = 0;
static __thread long t_tid = 0;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long this_tid(void) {
    if (!t_tid) t_tid = (long)syscall(SYS_gettid);
    return t_tid;
}

/* A forked child's thread is another thread than the one whose id it inherited. */
static void forget_tid_after_fork(void) { t_tid = 0; }

/* Appends an event (GIL held). `obj` is borrowed here and kept with a new reference. */
static void record_method(int kind, int ckind, PyObject *obj, const char *name, const void *method) {
    int64_t ts = now_ns();
    if (g_count == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 65536;
        Event *grown = (Event *)realloc(g_events, cap * sizeof(Event));
        if (!grown) {
            g_overflow = 1;
            return;
        }
        g_events = grown;
        g_cap = cap;
    }
    Event *e = &g_events[g_count++];
    e->ts_ns = ts;
    e->tid = this_tid();
    e->kind = kind;
    e->ckind = ckind;
    Py_XINCREF(obj);
    e->obj = obj;
    e->name = name;
    e->method = method;
}

static void record(int kind, int ckind, PyObject *obj, const char *name) {
    record_method(kind, ckind, obj, name, NULL);
}


/* True for framescope's own builtins (or a bound method wrapping one): its module's functions
 * (a profile's C-written start/stop/__exit__), methods of its types, and its types. framescope
 * does not record the program's calls into framescope (they are not what the program does). */
static int named_framescope(const char *name) {
    return name && strncmp(name, "framescope.", 11) == 0;
}

/* framescope._core's nanobind functions (mark, record_memory...), given by set_own(): their type,
 * nanobind.nb_func, is shared with other nanobind extensions, so they are told apart by identity. */
static PyObject *g_own_funcs = NULL; /* a tuple */

static PyObject *gt_set_own(PyObject *self, PyObject *funcs) {
    PyObject *t = PySequence_Tuple(funcs);
    if (!t) return NULL;
    Py_XSETREF(g_own_funcs, t);
    Py_RETURN_NONE;
}

static int is_framescope_own(PyObject *callable) {
    if (PyMethod_Check(callable)) callable = PyMethod_GET_FUNCTION(callable);
    if (g_own_funcs) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g_own_funcs); i++) {
            if (PyTuple_GET_ITEM(g_own_funcs, i) == callable) return 1;
        }
    }
    if (PyCFunction_Check(callable)) {
        PyObject *self = ((PyCFunctionObject *)callable)->m_self;
        if (!self) return 0;
        if (PyModule_Check(self)) {
            const char *module = PyModule_GetName(self);
            if (!module) PyErr_Clear();
            return named_framescope(module);
        }
        return named_framescope((PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self))->tp_name);
    }
    if (PyType_Check(callable)) return named_framescope(((PyTypeObject *)callable)->tp_name);
    return 0;
}

/* Records the opening of a C slice for `callable`, described without allocating. */
static void record_c_call(PyObject *callable) {
    if (is_framescope_own(callable)) {
        record(EV_C_OPEN, C_OWN, Py_None, NULL);
    } else if (PyCFunction_Check(callable)) {
        PyCFunctionObject *f = (PyCFunctionObject *)callable;
        PyObject *self = f->m_self;
        if (!self || PyModule_Check(self)) {
            record(EV_C_OPEN, C_FUNCTION, self ? self : Py_None, f->m_ml->ml_name);
        } else {
            PyObject *owner = PyType_Check(self) ? self : (PyObject *)Py_TYPE(self);
            record_method(EV_C_OPEN, C_METHOD, owner, f->m_ml->ml_name, f->m_ml);
        }
    } else if (Py_IS_TYPE(callable, &PyMethodDescr_Type) ||
               Py_IS_TYPE(callable, &PyClassMethodDescr_Type)) {
        PyMethodDescrObject *d = (PyMethodDescrObject *)callable;
        record(EV_C_OPEN, C_DESCR, (PyObject *)PyDescr_TYPE(d), d->d_method->ml_name);
    } else if (PyType_Check(callable)) {
        record(EV_C_OPEN, C_TYPE, callable, NULL);
    } else {
        record(EV_C_OPEN, C_INSTANCE, (PyObject *)Py_TYPE(callable), NULL);
    }
}

#if GT_PY312
/* ---- sys.monitoring ------------------------------------------------------------------------ */
static int g_tool = -1;

/* With a PEP 523 hook installed, CPython sends C_RETURN for Python functions too. */
static int is_python_function(PyObject *callable) {
    if (PyMethod_Check(callable)) callable = PyMethod_GET_FUNCTION(callable);
    return PyFunction_Check(callable);
}

static PyObject *mon_py_open(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    if (g_running && n >= 1) record(EV_PY_OPEN, 0, args[0], NULL);
    Py_RETURN_NONE;
}
static PyObject *mon_py_close(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    if (g_running && n >= 1) record(EV_PY_CLOSE, 0, args[0], NULL);
    Py_RETURN_NONE;
}
static PyObject *mon_call(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    if (g_running && n >= 3 && !is_python_function(args[2])) record_c_call(args[2]);
    Py_RETURN_NONE;
}
static PyObject *mon_c_close(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    if (g_running && n >= 3 && !is_python_function(args[2])) record(EV_C_CLOSE, 0, NULL, NULL);
    Py_RETURN_NONE;
}

static PyMethodDef k_callbacks[] = {
    {"py_open", (PyCFunction)(void (*)(void))mon_py_open, METH_FASTCALL, NULL},
    {"py_close", (PyCFunction)(void (*)(void))mon_py_close, METH_FASTCALL, NULL},
    {"call", (PyCFunction)(void (*)(void))mon_call, METH_FASTCALL, NULL},
    {"c_close", (PyCFunction)(void (*)(void))mon_c_close, METH_FASTCALL, NULL},
};
static const struct {
    const char *event;
    int callback; /* index in k_callbacks */
    int c_call;   /* a C-call event */
} k_bindings[] = {
    {"PY_START", 0, 0},  {"PY_RESUME", 0, 0}, {"PY_THROW", 0, 0},
    {"PY_RETURN", 1, 0}, {"PY_YIELD", 1, 0},  {"PY_UNWIND", 1, 0},
    {"CALL", 2, 1},      {"C_RETURN", 3, 1},  {"C_RAISE", 3, 1},
};

/* Registers (on=1) or clears (on=0) the callbacks and events of the recorder's tool. */
static int monitoring_apply(int on) {
    PyObject *mon = PySys_GetObject("monitoring"); /* borrowed */
    if (!mon) {
        PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is missing");
        return -1;
    }
    if (on && g_tool < 0) {
        /* Not 4 or 3, which framescope (the recorder under test) asks for first. */
        static const int candidates[] = {0, 1, 5, 4, 3};
        for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; ++i) {
            PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "is", candidates[i], "ground-truth");
            if (r) {
                Py_DECREF(r);
                g_tool = candidates[i];
                break;
            }
            PyErr_Clear();
        }
        if (g_tool < 0) {
            PyErr_SetString(PyExc_RuntimeError, "no free sys.monitoring tool id");
            return -1;
        }
    }
    if (g_tool < 0) return 0;
    PyObject *events = PyObject_GetAttrString(mon, "events");
    if (!events) return -1;
    long mask = 0;
    for (size_t i = 0; i < sizeof k_bindings / sizeof k_bindings[0]; ++i) {
        int want = on && (!k_bindings[i].c_call || g_c_calls);
        PyObject *ev = PyObject_GetAttrString(events, k_bindings[i].event);
        if (!ev) goto fail;
        PyObject *fn = want ? PyCFunction_New(&k_callbacks[k_bindings[i].callback], NULL)
                            : Py_NewRef(Py_None);
        PyObject *r = fn ? PyObject_CallMethod(mon, "register_callback", "iOO", g_tool, ev, fn) : NULL;
        if (want) mask |= PyLong_AsLong(ev);
        Py_XDECREF(fn);
        Py_DECREF(ev);
        if (!r) goto fail;
        Py_DECREF(r);
    }
    Py_DECREF(events);
    PyObject *r = PyObject_CallMethod(mon, "set_events", "il", g_tool, mask);
    if (!r) return -1;
    Py_DECREF(r);
    if (!on) {
        r = PyObject_CallMethod(mon, "free_tool_id", "i", g_tool);
        if (!r) return -1;
        Py_DECREF(r);
        g_tool = -1;
    }
    return 0;
fail:
    Py_DECREF(events);
    return -1;
}

static int hooks_start(void) { return monitoring_apply(1); }
static int hooks_stop(void) { return monitoring_apply(0); }

#else
/* ---- trace / profile function on every thread ----------------------------------------------- */
static PyObject *s_f_trace_lines = NULL; /* interned "f_trace_lines" */

static int trace_callback(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    if (!g_running) return 0;
    switch (what) {
        case PyTrace_CALL: {
            /* No line events: only calls and returns matter. (A setter; allocates nothing.) */
            if (PyObject_SetAttr((PyObject *)frame, s_f_trace_lines, Py_False) < 0) PyErr_Clear();
            PyCodeObject *code = PyFrame_GetCode(frame); /* new */
            record(EV_PY_OPEN, 0, (PyObject *)code, NULL);
            Py_DECREF(code);
            break;
        }
        case PyTrace_RETURN: {
            PyCodeObject *code = PyFrame_GetCode(frame); /* new */
            record(EV_PY_CLOSE, 0, (PyObject *)code, NULL);
            Py_DECREF(code);
            break;
        }
        case PyTrace_C_CALL:
            record_c_call(arg);
            break;
        case PyTrace_C_RETURN:
        case PyTrace_C_EXCEPTION:
            record(EV_C_CLOSE, 0, NULL, NULL);
            break;
        default:
            break;
    }
    return 0;
}

/* Installs (on=1) or removes our function in the calling thread's slot. */
static void set_hook(PyThreadState *ts, int on) {
    if (g_c_calls) {
        if (on || ts->c_profilefunc == trace_callback) {
            if (_PyEval_SetProfile(ts, on ? trace_callback : NULL, NULL) < 0) PyErr_Clear();
        }
    } else if (on || ts->c_tracefunc == trace_callback) {
        if (_PyEval_SetTrace(ts, on ? trace_callback : NULL, NULL) < 0) PyErr_Clear();
    }
}

static void set_hook_all_threads(int on) {
    PyInterpreterState *interp = PyThreadState_Get()->interp;
    for (PyThreadState *t = PyInterpreterState_ThreadHead(interp); t; t = PyThreadState_Next(t)) {
        set_hook(t, on);
    }
}

/* A thread's entry point wrapped so that the hook is in place before its first frame. */
typedef struct {
    PyObject_HEAD
    PyObject *func;
} ThreadEntry;

static void entry_dealloc(ThreadEntry *self) {
    Py_XDECREF(self->func);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *entry_call(ThreadEntry *self, PyObject *args, PyObject *kwargs) {
    if (g_running) set_hook(PyThreadState_Get(), 1);
    return PyObject_Call(self->func, args, kwargs);
}

static PyTypeObject ThreadEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ground_truth_recorder.ThreadEntry",
    .tp_basicsize = sizeof(ThreadEntry),
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_call = (ternaryfunc)entry_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

static PyObject *g_orig_start_new_thread = NULL; /* _thread.start_new_thread (strong) */
static PyObject *g_saved_threading_start = NULL; /* threading._start_new_thread (strong) */

/* start_new_thread(function, args[, kwargs]) with `function` wrapped. */
static PyObject *wrapped_start_new_thread(PyObject *self, PyObject *args) {
    PyObject *func, *fargs, *kwargs = NULL;
    if (!PyArg_ParseTuple(args, "OO|O:start_new_thread", &func, &fargs, &kwargs)) return NULL;
    ThreadEntry *entry = PyObject_New(ThreadEntry, &ThreadEntryType);
    if (!entry) return NULL;
    entry->func = Py_NewRef(func);
    PyObject *r = kwargs ? PyObject_CallFunction(g_orig_start_new_thread, "OOO", entry, fargs, kwargs)
                         : PyObject_CallFunction(g_orig_start_new_thread, "OO", entry, fargs);
    Py_DECREF(entry);
    return r;
}
static PyMethodDef k_wrapped_start = {"start_new_thread", wrapped_start_new_thread, METH_VARARGS,
                                      NULL};

static int hooks_start(void) {
    PyObject *thread_mod = PyImport_ImportModule("_thread");
    PyObject *threading = thread_mod ? PyImport_ImportModule("threading") : NULL;
    if (!threading) {
        Py_XDECREF(thread_mod);
        return -1;
    }
    g_orig_start_new_thread = PyObject_GetAttrString(thread_mod, "start_new_thread");
    g_saved_threading_start = PyObject_GetAttrString(threading, "_start_new_thread");
    /* Bound to _thread, so that a builtin call of it is named _thread.start_new_thread. */
    PyObject *wrapper = PyCFunction_New(&k_wrapped_start, thread_mod);
    int rc = -1;
    if (g_orig_start_new_thread && g_saved_threading_start && wrapper &&
        PyObject_SetAttrString(thread_mod, "start_new_thread", wrapper) == 0 &&
        PyObject_SetAttrString(threading, "_start_new_thread", wrapper) == 0) {
        rc = 0;
    }
    Py_XDECREF(wrapper);
    Py_DECREF(thread_mod);
    Py_DECREF(threading);
    if (rc == 0) set_hook_all_threads(1);
    return rc;
}

static int hooks_stop(void) {
    set_hook_all_threads(0);
    PyObject *thread_mod = PyImport_ImportModule("_thread");
    PyObject *threading = PyImport_ImportModule("threading");
    int rc = (thread_mod && threading &&
              PyObject_SetAttrString(thread_mod, "start_new_thread", g_orig_start_new_thread) == 0 &&
              PyObject_SetAttrString(threading, "_start_new_thread", g_saved_threading_start) == 0)
                 ? 0
                 : -1;
    Py_XDECREF(thread_mod);
    Py_XDECREF(threading);
    Py_CLEAR(g_orig_start_new_thread);
    Py_CLEAR(g_saved_threading_start);
    return rc;
}
#endif

/* ---- module functions ---------------------------------------------------------------------- */
/* Room for this many events is allocated and touched at start: growing the array (or faulting
 * its fresh pages in) inside a callback would delay the other recorder's callback that follows
 * for the same event, and its timestamp with it. */
#define PREFAULTED_EVENTS ((size_t)1 << 18)

static int reserve_events(void) {
    if (g_cap >= PREFAULTED_EVENTS) return 0;
    Event *events = (Event *)realloc(g_events, PREFAULTED_EVENTS * sizeof(Event));
    if (!events) return -1;
    memset(events, 0, PREFAULTED_EVENTS * sizeof(Event));
    g_events = events;
    g_cap = PREFAULTED_EVENTS;
    return 0;
}

static void clear_events(void) {
    for (size_t i = 0; i < g_count; ++i) Py_XDECREF(g_events[i].obj);
    g_count = 0;
    g_overflow = 0;
}

/* start(c_calls) -> (start_ns, {thread ident: [code, ...] outermost first}) */
static PyObject *gt_start(PyObject *self, PyObject *args) {
    int c_calls = 0;
    if (!PyArg_ParseTuple(args, "p", &c_calls)) return NULL;
    if (g_running) {
        PyErr_SetString(PyExc_RuntimeError, "the ground-truth recorder is already running");
        return NULL;
    }
    clear_events();
    if (reserve_events() < 0) return PyErr_NoMemory();
    g_c_calls = c_calls;
    PyObject *frames = _PyThread_CurrentFrames(); /* new: ident -> innermost frame */
    if (!frames) return NULL;
    PyObject *stacks = PyDict_New();
    PyObject *ident, *frame;
    Py_ssize_t pos = 0;
    while (stacks && PyDict_Next(frames, &pos, &ident, &frame)) {
        PyObject *codes = PyList_New(0);
        PyFrameObject *f = (PyFrameObject *)Py_NewRef(frame);
        while (codes && f) {
            PyCodeObject *code = PyFrame_GetCode(f);
            if (PyList_Insert(codes, 0, (PyObject *)code) < 0) Py_CLEAR(codes);
            Py_DECREF(code);
            PyFrameObject *back = PyFrame_GetBack(f);
            Py_DECREF(f);
            f = back;
        }
        Py_XDECREF(f);
        if (!codes || PyDict_SetItem(stacks, ident, codes) < 0) Py_CLEAR(stacks);
        Py_XDECREF(codes);
    }
    Py_DECREF(frames);
    if (!stacks) return NULL;
    int64_t start = now_ns();
    g_running = 1;
    if (hooks_start() < 0) {
        g_running = 0;
        Py_DECREF(stacks);
        return NULL;
    }
    return Py_BuildValue("(LN)", (long long)start, stacks);
}

/* stop() -> (stop_ns, [(ts_ns, tid, kind, ckind, obj, name), ...]) */
static PyObject *gt_stop(PyObject *self, PyObject *unused) {
    if (!g_running) {
        PyErr_SetString(PyExc_RuntimeError, "the ground-truth recorder is not running");
        return NULL;
    }
    g_running = 0;
    int64_t stop = now_ns();
    if (hooks_stop() < 0) return NULL;
    if (g_overflow) {
        clear_events();
        PyErr_NoMemory();
        return NULL;
    }
    PyObject *out = PyList_New((Py_ssize_t)g_count);
    for (size_t i = 0; out && i < g_count; ++i) {
        const Event *e = &g_events[i];
        PyObject *item = Py_BuildValue("(LliiOzK)", (long long)e->ts_ns, e->tid, e->kind, e->ckind,
                                       e->obj ? e->obj : Py_None, e->name,
                                       (unsigned long long)(uintptr_t)e->method);
        if (!item) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
    clear_events();
    if (!out) return NULL;
    return Py_BuildValue("(LN)", (long long)stop, out);
}

/* method_def(obj) -> the address of the PyMethodDef of a builtin function or method, or of a
 * method descriptor (classmethod descriptors included); 0 for anything else. */
static PyObject *gt_method_def(PyObject *self, PyObject *obj) {
    const void *def = NULL;
    if (PyCFunction_Check(obj)) {
        def = ((PyCFunctionObject *)obj)->m_ml;
    } else if (Py_IS_TYPE(obj, &PyMethodDescr_Type) || Py_IS_TYPE(obj, &PyClassMethodDescr_Type)) {
        def = ((PyMethodDescrObject *)obj)->d_method;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)def);
}

/* The calling thread's OS id, as recorded with each event. */
static PyObject *gt_tid(PyObject *self, PyObject *unused) { return PyLong_FromLong(this_tid()); }

static PyMethodDef k_methods[] = {
    {"start", gt_start, METH_VARARGS, "start(c_calls) -> (start_ns, initial stacks by ident)"},
    {"stop", gt_stop, METH_NOARGS, "stop() -> (stop_ns, events)"},
    {"tid", gt_tid, METH_NOARGS, "the calling thread's OS id"},
    {"method_def", gt_method_def, METH_O, "the PyMethodDef address of a builtin, or 0"},
    {"set_own", gt_set_own, METH_O, "set_own(funcs): callables that are framescope's own builtins"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef k_module = {PyModuleDef_HEAD_INIT, "ground_truth_recorder", NULL, -1,
                                      k_methods};

PyMODINIT_FUNC PyInit_ground_truth_recorder(void) {
    if (pthread_atfork(NULL, NULL, forget_tid_after_fork) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
#if !GT_PY312
    if (PyType_Ready(&ThreadEntryType) < 0) return NULL;
    s_f_trace_lines = PyUnicode_InternFromString("f_trace_lines");
    if (!s_f_trace_lines) return NULL;
#endif
    return PyModule_Create(&k_module);
}
