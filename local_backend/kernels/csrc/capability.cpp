// What this build of the kernels is: `kvwise::vector_lanes`, the floats in one of its ATen vectors, so the
// loader can check that the library it loaded is the variant it asked for (`cpu_kernels.py`).

#include <torch/library.h>

#include "lanes.h"

namespace {

int64_t vector_lanes() { return kvwise::Vec::size(); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) { m.def("vector_lanes() -> int", vector_lanes); }
