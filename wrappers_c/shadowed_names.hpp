// shadowed_names.hpp — which of a kernel library's own names libpaths would take over. libpaths
// is in the process's global scope (kernels find paths_* there), which the dynamic linker searches
// before a library's own definitions: a kernel's function named as one of libpaths' internal ones
// (ps_*) would be bound to libpaths' function, silently.
#ifndef WRAPPERS_SHADOWED_NAMES_HPP
#define WRAPPERS_SHADOWED_NAMES_HPP

#include <string>

namespace paths_native {

// The first function or variable the shared library at `path` defines that libpaths also
// exports, or "" (also for a file that is no ELF shared library of this machine's class).
std::string name_libpaths_shadows(const std::string &path);

}  // namespace paths_native

#endif
