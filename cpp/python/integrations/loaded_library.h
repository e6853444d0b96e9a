// cpp/python/integrations/loaded_library.h: finding functions in a library the process has
// already loaded (torch's), by symbol name, without linking against it.
#pragma once

#include <dlfcn.h>
#include <link.h>

#include <string>

namespace framescope::py {

/// A library already loaded into the process: its dlopen handle (a reference the caller keeps
/// or dlcloses) and its path. `handle` is null when no loaded library exported the symbol.
struct LoadedLibrary {
  void* handle = nullptr;
  std::string path;
};

/// The first loaded library that exports `probe`. dlopen with RTLD_NOLOAD only ever returns a
/// handle to an object that is already mapped: never a second copy of torch. Walks the loader's
/// list (dl_iterate_phdr holds its lock): call it outside any lock a loader callback could take.
inline LoadedLibrary find_loaded_library(const char* probe) {
  struct Search {
    const char* probe;
    LoadedLibrary found;
  } search{probe, {}};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
        void* h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        if (h == nullptr) return 0;
        if (dlsym(h, s->probe) != nullptr) {
          s->found.handle = h;
          s->found.path = info->dlpi_name;
          return 1;
        }
        dlclose(h);
        return 0;
      },
      &search);
  return search.found;
}

/// Looks `symbol` up in `library` into `out` (a function pointer type); when it is absent, `out`
/// is null, the name is appended to `missing` (comma-separated) and the result is false.
template <class F>
bool resolve_symbol(void* library, const char* symbol, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(library, symbol));
  if (out == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
  return out != nullptr;
}

}  // namespace framescope::py
