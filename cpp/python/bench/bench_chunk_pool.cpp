// cpp/python/bench/bench_chunk_pool.cpp: _core._chunk_pool_stats(), what the chunk pool mapped
// and where (bench/self_time_stalls.py; not API).
#include "py_compat.h"  // first: Python.h

#include "chunk_pool.h"

namespace framescope::py {

namespace {

PyObject* chunk_pool_stats(PyObject*, PyObject*) {
  const internal::ChunkPool::Stats s = internal::ChunkPool::instance().stats();
  return Py_BuildValue("{s:n,s:n,s:n}", "mapped_ahead", Py_ssize_t(s.mapped_ahead),
                       "mapped_on_demand", Py_ssize_t(s.mapped_on_demand), "free_chunks",
                       Py_ssize_t(s.free_chunks));
}

PyMethodDef g_chunk_pool_methods[] = {
    {"_chunk_pool_stats", chunk_pool_stats, METH_NOARGS,
     "_chunk_pool_stats() -> dict[str, int]\n--\n\n"
     "Full event chunks this process mapped ahead (the refill thread, a session's start) and on "
     "demand (by a recording thread that found none free), and the free chunks now. For "
     "benchmarks."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

/// Adds _chunk_pool_stats to the extension module. False with a Python exception set on error.
bool bench_chunk_pool_init(PyObject* module) {
  return PyModule_AddFunctions(module, g_chunk_pool_methods) == 0;
}

}  // namespace framescope::py
