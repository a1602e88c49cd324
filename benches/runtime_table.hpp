// runtime_table.hpp: a llaisys runtime table loaded from a shared library (table_bench's
// backends, weights_load's and graph_bench's libraries). Needs no cudart of its own.
#pragma once

#include <dlfcn.h>

#include <string>

#include "bench_util.hpp"
#include "llaisys_runtime.h"

namespace bench {

// dlopens `path` (RTLD_NOW | RTLD_LOCAL: each library keeps its own cudart and symbols) and calls
// the table getter `symbol`. Exits with a clear message (code 2) when either is missing, or when
// the table or one of its 12 entries is NULL. The handle stays open for the life of the process.
inline const LlaisysRuntimeAPI *load_runtime_table(const std::string &label, const std::string &path,
                                                   const char *symbol) {
    static_assert(sizeof(LlaisysRuntimeAPI) == 12 * sizeof(void *), "the llaisys table has 12 function pointers");
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) die(2, "%s: cannot load %s: %s", label.c_str(), path.c_str(), dlerror());
    dlerror();
    void *sym = dlsym(h, symbol);
    const char *err = dlerror();
    if (err || !sym) die(2, "%s: %s has no symbol %s: %s", label.c_str(), path.c_str(), symbol, err ? err : "NULL");
    using Getter = const LlaisysRuntimeAPI *(*)();
    const LlaisysRuntimeAPI *t = reinterpret_cast<Getter>(sym)();
    if (!t) die(2, "%s: %s() returned NULL", label.c_str(), symbol);
    const void *const *fns = reinterpret_cast<const void *const *>(t);
    for (int i = 0; i < 12; ++i)
        if (!fns[i]) die(2, "%s: table entry %d of %s is NULL", label.c_str(), i, path.c_str());
    return t;
}

}  // namespace bench
