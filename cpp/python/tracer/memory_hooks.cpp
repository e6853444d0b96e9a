// cpp/python/tracer/memory_hooks.cpp: the counting wrappers around Python's MEM and OBJ allocators.
#include "tracer/frame_hook.h"  // first: it includes Python.h with the internal headers

#include <atomic>

#include "tracer/memory_hooks.h"

namespace framescope::py {

thread_local AllocationCounter t_allocations __attribute__((tls_model("initial-exec"))) = {0, 0};
bool g_memory_tracking = false;

namespace {

// The session whose allocations are counted, 0 when none. Read by the wrappers without the GIL
// being required by the C API contract (MEM and OBJ are called with it held, but a relaxed atomic
// costs the same as a plain load and keeps a stray caller well-defined).
std::atomic<uint64_t> g_counting_epoch{0};

// One wrapped domain. Static storage: a wrapper left in place under another tool's (see
// memory_hooks_stop) keeps reading it for the life of the process.
struct Domain {
  PyMemAllocatorDomain domain;
  PyMemAllocatorEx previous;  // what we call (and restore)
  PyMemAllocatorEx ours;
  bool installed;
};
Domain g_domains[2] = {{PYMEM_DOMAIN_MEM, {}, {}, false}, {PYMEM_DOMAIN_OBJ, {}, {}, false}};

// Set by a wrapper that ran while no session counted: memory_hooks_start() uses it to learn
// whether a wrapper left under another tool's is still in the chain.
bool g_probe_hit = false;

FRAMESCOPE_ALWAYS_INLINE void count(size_t bytes) noexcept {
  const uint64_t epoch = g_counting_epoch.load(std::memory_order_relaxed);
  if (epoch == 0) {
    g_probe_hit = true;
    return;
  }
  AllocationCounter& c = t_allocations;
  if (FRAMESCOPE_UNLIKELY(c.epoch != epoch)) {
    c.epoch = epoch;
    c.pending = 0;
  }
  c.pending += bytes;
}

void* counting_malloc(void* ctx, size_t size) {
  auto* d = static_cast<Domain*>(ctx);
  void* p = d->previous.malloc(d->previous.ctx, size);
  if (p) count(size);
  return p;
}

void* counting_calloc(void* ctx, size_t nelem, size_t elsize) {
  auto* d = static_cast<Domain*>(ctx);
  void* p = d->previous.calloc(d->previous.ctx, nelem, elsize);
  if (p) count(nelem * elsize);
  return p;
}

// The size a realloc asks for is counted in full: the old size is not known here (pymalloc does
// not say, and a table of live blocks would cost more than the allocation).
void* counting_realloc(void* ctx, void* ptr, size_t new_size) {
  auto* d = static_cast<Domain*>(ctx);
  void* p = d->previous.realloc(d->previous.ctx, ptr, new_size);
  if (p) count(new_size);
  return p;
}

void counting_free(void* ctx, void* ptr) {
  auto* d = static_cast<Domain*>(ctx);
  d->previous.free(d->previous.ctx, ptr);
}

bool ours_installed(const Domain& d) {
  PyMemAllocatorEx current;
  PyMem_GetAllocator(d.domain, &current);
  return current.malloc == counting_malloc && current.ctx == &d;
}

// Whether an allocation in d's domain still passes through our wrapper (left under another
// tool's wrapper at an earlier stop; that tool may have been stopped since, dropping it).
bool ours_in_chain(const Domain& d) {
  if (ours_installed(d)) return true;
  g_probe_hit = false;
  if (d.domain == PYMEM_DOMAIN_MEM) {
    PyMem_Free(PyMem_Malloc(1));
  } else {
    PyObject_Free(PyObject_Malloc(1));
  }
  return g_probe_hit;
}

// Puts our counting allocator in front of the domain's current one (which it calls).
void wrap_allocator(Domain& d) {
  PyMem_GetAllocator(d.domain, &d.previous);
  d.ours = PyMemAllocatorEx{&d, counting_malloc, counting_calloc, counting_realloc, counting_free};
  PyMem_SetAllocator(d.domain, &d.ours);
  d.installed = true;
}

}  // namespace

void memory_hooks_start(uint64_t epoch) {
  for (Domain& d : g_domains) {
    // Still in the chain from an earlier session: counting resumes through it. (Wrapping again
    // would overwrite `previous`, which the wrapper in the chain calls: a loop.)
    if (d.installed && ours_in_chain(d)) continue;
    wrap_allocator(d);
  }
  g_counting_epoch.store(epoch, std::memory_order_relaxed);
  g_memory_tracking = true;
  hook_set_memory_variant(true);
}

MemoryHooksState memory_hooks_stop() {
  g_counting_epoch.store(0, std::memory_order_relaxed);  // (the probes below count nothing)
  g_memory_tracking = false;
  hook_set_memory_variant(false);
  bool under_another = false;
  bool dropped = false;
  for (Domain& d : g_domains) {
    if (!d.installed) continue;
    if (ours_installed(d)) {
      PyMem_SetAllocator(d.domain, &d.previous);
      d.installed = false;
    } else if (ours_in_chain(d)) {
      under_another = true;  // under another tool's wrapper: stays, counting nothing
    } else {
      dropped = true;  // unlinked by another tool: nothing of ours is left to restore
      d.installed = false;
    }
  }
  if (dropped) return MemoryHooksState::kDropped;
  return under_another ? MemoryHooksState::kUnderAnother : MemoryHooksState::kRestored;
}

bool memory_hooks_rearm() {
  if (!g_memory_tracking) return false;
  const uint64_t epoch = g_counting_epoch.load(std::memory_order_relaxed);
  g_counting_epoch.store(0, std::memory_order_relaxed);  // the probes must not be counted
  bool rearmed = false;
  for (Domain& d : g_domains) {
    if (d.installed && ours_in_chain(d)) continue;
    wrap_allocator(d);
    rearmed = true;
  }
  g_counting_epoch.store(epoch, std::memory_order_relaxed);
  return rearmed;
}

bool memory_hooks_on_top(bool obj_domain) { return ours_installed(g_domains[obj_domain ? 1 : 0]); }

}  // namespace framescope::py
