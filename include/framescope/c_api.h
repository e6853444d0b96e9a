/* framescope/c_api.h: C ABI for C and C++ extensions built separately from framescope.
 *
 * Usage, in module init (GIL held):
 *     if (framescope_import_c_api() < 0) return NULL;   // Python exception set
 * then anywhere (any thread):
 *     framescope_range* r = framescope_range_enter("decode");
 *     ... work ...
 *     framescope_range_exit(r);
 * Ranges land in the active framescope session (category "user_annotation"), nested with the
 * Python frames of the calling thread. No link step is needed: the functions are reached
 * through a capsule exported by framescope._core. The table pointer is per translation unit
 * (static), so call framescope_import_c_api() in each translation unit that records ranges.
 */
#ifndef FRAMESCOPE_C_API_H
#define FRAMESCOPE_C_API_H

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FRAMESCOPE_C_API_CAPSULE "framescope._core._C_API"
#define FRAMESCOPE_C_API_VERSION 1

/** An open range; NULL when nothing records (framescope_range_exit accepts NULL). */
typedef struct framescope_range framescope_range;

/** The function table behind the capsule. Only appended to; abi_version says how far. */
typedef struct framescope_c_api {
  int abi_version;
  /** Opens a range named by a copy of `name` (UTF-8); NULL when nothing records. Thread-safe. */
  framescope_range* (*range_enter)(const char* name);
  /** Closes a range from range_enter (on any thread). NULL is a no-op. Thread-safe. */
  void (*range_exit)(framescope_range* range);
  /** Records an instant event named by a copy of `name`. Thread-safe. */
  void (*mark)(const char* name);
  /** 1 while a session records, else 0. Thread-safe. */
  int (*is_enabled)(void);
} framescope_c_api;

static const framescope_c_api* framescope_api_ = NULL;

/** Imports the table. Returns 0, or -1 with a Python exception set (framescope missing or too
 *  old). Needs the GIL. */
static inline int framescope_import_c_api(void) {
  const framescope_c_api* api =
      (const framescope_c_api*)PyCapsule_Import(FRAMESCOPE_C_API_CAPSULE, 0);
  if (api == NULL) return -1;
  if (api->abi_version < FRAMESCOPE_C_API_VERSION) {
    PyErr_Format(PyExc_ImportError, "framescope C API version %d is older than required %d",
                 api->abi_version, FRAMESCOPE_C_API_VERSION);
    return -1;
  }
  framescope_api_ = api;
  return 0;
}

static inline framescope_range* framescope_range_enter(const char* name) {
  return framescope_api_ ? framescope_api_->range_enter(name) : NULL;
}
static inline void framescope_range_exit(framescope_range* range) {
  if (framescope_api_ && range) framescope_api_->range_exit(range);
}
static inline void framescope_mark(const char* name) {
  if (framescope_api_) framescope_api_->mark(name);
}
static inline int framescope_is_enabled(void) {
  return framescope_api_ ? framescope_api_->is_enabled() : 0;
}

#ifdef __cplusplus
}
#endif

#endif /* FRAMESCOPE_C_API_H */
