// cpp/python/integrations/term_signal.cpp: saving a followed child's trace when SIGTERM ends it.
//
// multiprocessing ends pool workers with SIGTERM (Pool.terminate(), and so `with Pool() as p:`).
// A Python-level handler (signal.signal) cannot do this reliably: CPython runs it only when the
// main thread next checks for signals, and a signal that lands between sem_trywait and sem_wait
// in SemLock.acquire (an idle worker waiting for a task) is never checked again: the process
// would ignore SIGTERM for good and the parent's join() would hang. So the handler here is a
// C one (sigaction) that only writes a byte to a pipe; a thread of ours, blocked on that pipe,
// takes the GIL, calls the Python callback (which stops the session and saves the trace), then
// restores the default action and sends SIGTERM again, so the process ends as it would have.
//
// Guards: the callback returns whether to end the process now (False when the main thread is
// already saving: it ends the process itself once done); if the GIL cannot be had within
// kGilDeadline (the main thread holds it in a long C call), the process ends without saving,
// as it would without framescope. A fork child inherits the handler but not the thread: the
// pthread_atfork child handler puts the default action back there. A program that installs its
// own SIGTERM handler replaces this one (it is then the program's business).
#include <Python.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>

#include "framescope/internal/thread_buffer.h"

namespace framescope::py {

namespace {

constexpr auto kGilDeadline = std::chrono::seconds(10);

int g_pipe[2] = {-1, -1};
PyObject* g_callback = nullptr;  // new reference, kept for the process's life

void on_sigterm(int) {
  const int saved = errno;
  const char byte = 1;
  ssize_t n = write(g_pipe[1], &byte, 1);  // async-signal-safe; a full pipe is already signalled
  (void)n;
  errno = saved;
}

bool handler_is_ours() {
  struct sigaction current;
  return sigaction(SIGTERM, nullptr, &current) == 0 && current.sa_handler == on_sigterm;
}

void die_of_sigterm() {
  signal(SIGTERM, SIG_DFL);
  kill(getpid(), SIGTERM);
}

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

void watch() {
  char byte;
  while (read(g_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  if (!handler_is_ours() || interpreter_finalizing()) {
    if (handler_is_ours()) die_of_sigterm();
    return;
  }
  // The deadline: a process whose GIL is held for good must still end on SIGTERM.
  auto got_gil = std::make_shared<std::atomic<bool>>(false);
  std::thread([got_gil] {
    std::this_thread::sleep_for(kGilDeadline);
    if (!got_gil->load()) die_of_sigterm();
  }).detach();
  PyGILState_STATE st = PyGILState_Ensure();
  got_gil->store(true);
  // The callback's Python calls are framescope's own, not the program's: this thread is marked
  // as not recording in the session (the slot current_buffer() consults first). Read with the
  // GIL held: a session starting in the main thread (SIGTERM during start-up) has started.
  internal::t_slot.set(nullptr, internal::g_session_epoch.load(std::memory_order_acquire));
  bool end_now = true;
  PyObject* result = PyObject_CallNoArgs(g_callback);  // new
  if (!result) {
    PyErr_Print();
  } else {
    end_now = PyObject_IsTrue(result) != 0;
    Py_DECREF(result);
  }
  PyGILState_Release(st);
  if (end_now) die_of_sigterm();
}

void reset_in_fork_child() {
  if (handler_is_ours()) signal(SIGTERM, SIG_DFL);
}

// _save_on_sigterm(callback) -> bool: installs the handler and the thread (once per process);
// False when SIGTERM already has a handler other than the default.
PyObject* save_on_sigterm(PyObject*, PyObject* callback) {
  if (!PyCallable_Check(callback)) {
    PyErr_SetString(PyExc_TypeError, "_save_on_sigterm: callback must be callable");
    return nullptr;
  }
  struct sigaction current;
  if (sigaction(SIGTERM, nullptr, &current) != 0) return PyErr_SetFromErrno(PyExc_OSError);
  if (current.sa_handler == on_sigterm) Py_RETURN_TRUE;
  if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) Py_RETURN_FALSE;
  static const bool atfork = pthread_atfork(nullptr, nullptr, reset_in_fork_child) == 0;
  (void)atfork;
  if (pipe2(g_pipe, O_CLOEXEC) != 0) return PyErr_SetFromErrno(PyExc_OSError);
  Py_INCREF(callback);
  Py_XSETREF(g_callback, callback);
  try {
    std::thread(watch).detach();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "framescope: cannot start the SIGTERM thread: %s", e.what());
    return nullptr;
  }
  struct sigaction action = {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &action, nullptr) != 0) return PyErr_SetFromErrno(PyExc_OSError);
  Py_RETURN_TRUE;
}

PyMethodDef g_term_methods[] = {
    {"_save_on_sigterm", save_on_sigterm, METH_O,
     "Calls callback() (from a thread of framescope's, with the GIL) when SIGTERM arrives, then "
     "ends the process by SIGTERM if it returned true. False when SIGTERM has a handler."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool term_signal_init(PyObject* module) {
  return PyModule_AddFunctions(module, g_term_methods) == 0;
}

}  // namespace framescope::py
