// What runner.cc, runner_dynamic.cc and runner_in_place.cc share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/runner.h"

namespace mlx_ep {

/** Bytes of `t`'s data. */
inline size_t ByteSize(const InputTensor& t) {
  size_t n = ElemSize(t.type);
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace mlx_ep
