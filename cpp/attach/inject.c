/* cpp/attach/inject.c: loaded by gdb into a process `framescope attach` targets; starts one
 * thread there that takes the GIL the ordinary way and runs the attach bootstrap.
 *
 * Why a thread of its own (as memray's injector): gdb stops the target at an arbitrary
 * instruction. Running Python code on the interrupted thread would be running it in the middle
 * of whatever C code that thread was executing (half-built objects, locks held). The only work
 * done on the interrupted thread is dlopen() and pthread_create(), both made from a point where
 * it holds no malloc or loader lock (see src/framescope/attach/_gdb_script.gdbpy). The new thread
 * then asks for the GIL with PyGILState_Ensure(): it gets it when the thread holding it drops it at
 * a safe point (the eval loop's GIL drop request, between bytecodes, or a blocking call that
 * released it), so the bootstrap runs while every other thread is at such a point, as any C
 * extension's callback thread would.
 *
 * Deliberately free of Python.h: the few functions used are in the stable ABI of 3.10-3.13 and
 * are resolved at dlopen() in the target's libpython, so one build serves every version. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef struct _object PyObject;
typedef int PyGILState_STATE; /* an enum in Python.h: int-sized */

#define FS_PY_FILE_INPUT 257 /* Py_file_input */

extern int Py_IsInitialized(void);
extern PyGILState_STATE PyGILState_Ensure(void);
extern void PyGILState_Release(PyGILState_STATE);
extern PyObject* Py_CompileString(const char*, const char*, int);
extern PyObject* PyEval_EvalCode(PyObject*, PyObject*, PyObject*);
extern PyObject* PyDict_New(void);
extern int PyDict_SetItemString(PyObject*, const char*, PyObject*);
extern PyObject* PyDict_GetItemString(PyObject*, const char*);
extern ssize_t PyTuple_Size(PyObject*); /* Py_ssize_t is ssize_t */
extern PyObject* PyTuple_GetItem(PyObject*, ssize_t);
extern PyObject* PyObject_CallFunctionObjArgs(PyObject*, ...);
extern PyObject* PyEval_GetBuiltins(void);
extern PyObject* PyErr_Occurred(void);
extern void PyErr_Clear(void);
extern void Py_DecRef(PyObject*);

struct fs_job {
  char* source;
  char* filename;
};

static void fs_free_job(struct fs_job* job) {
  free(job->source);
  free(job->filename);
  free(job);
}

static void* fs_run(void* arg) {
  struct fs_job* job = (struct fs_job*)arg;
  /* A target already finalizing would never give the GIL back to a new thread. */
  if (Py_IsInitialized()) {
    PyGILState_STATE state = PyGILState_Ensure();
    /* Fresh globals: nothing is bound in the program's own modules (PyRun_SimpleString would
     * run in __main__'s namespace). The bootstrap reports its own errors to the attach command
     * over its socket; one escaping here is cleared, never printed on the target's stderr. */
    PyObject* code = Py_CompileString(job->source, job->filename, FS_PY_FILE_INPUT);
    PyObject* globals = code ? PyDict_New() : NULL;
    if (globals && PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) == 0) {
      Py_DecRef(PyEval_EvalCode(code, globals, globals));
      if (PyErr_Occurred()) PyErr_Clear();
      /* The bootstrap's last step, (atexit.unregister, its exit guard), is called from here:
       * C calling C, no bytecode, so the eval loop cannot hand the GIL to a thread that starts
       * the program's exit between the guard going and this thread's state being deleted
       * below (a thread state left waiting for the GIL while the interpreter finalizes is
       * freed under it: see ExitGuard in attach/_bootstrap.py). */
      PyObject* last = PyDict_GetItemString(globals, "_framescope_finally"); /* borrowed */
      if (last && PyTuple_Size(last) == 2) {
        Py_DecRef(PyObject_CallFunctionObjArgs(PyTuple_GetItem(last, 0), PyTuple_GetItem(last, 1),
                                               (PyObject*)0));
      }
    }
    Py_DecRef(globals);
    Py_DecRef(code);
    if (PyErr_Occurred()) PyErr_Clear();
    PyGILState_Release(state); /* the thread state made by Ensure is deleted here */
  }
  fs_free_job(job);
  return NULL;
}

/* Called by gdb: copies the bootstrap source and its file name (gdb's copies are not ours to
 * keep) and starts the thread. Returns 0, or an errno value. */
__attribute__((visibility("default"))) int framescope_inject(const char* source,
                                                             const char* filename) {
  struct fs_job* job = (struct fs_job*)calloc(1, sizeof *job);
  if (!job) return 12; /* ENOMEM */
  job->source = strdup(source);
  job->filename = strdup(filename);
  if (!job->source || !job->filename) {
    fs_free_job(job);
    return 12;
  }
  /* Every signal blocked in the new thread (it inherits this mask): the kernel then never picks
   * it to deliver the process's signals, so their handling stays exactly the program's. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  int rc = pthread_create(&thread, &attr, fs_run, job);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    fs_free_job(job);
    return rc;
  }
  pthread_setname_np(thread, "framescope-att");
  return 0;
}
