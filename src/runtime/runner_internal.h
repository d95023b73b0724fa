// What runner.cc, runner_dynamic.cc, runner_in_place.cc and runner_buckets.cc share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/runner.h"

namespace mlx_ep {

/** Bytes of `t`'s data. */
inline size_t ByteSize(const InputTensor& t) {
  size_t n = ElemSize(t.type);
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  return n;
}

/** The tensors of HostValues as the pointers a trace takes (null for inputs not on the host). */
inline std::vector<const Tensor*> HostPointers(const std::vector<std::shared_ptr<const Tensor>>& host) {
  std::vector<const Tensor*> ptrs(host.size(), nullptr);
  for (size_t i = 0; i < host.size(); ++i) ptrs[i] = host[i].get();
  return ptrs;
}

}  // namespace mlx_ep
