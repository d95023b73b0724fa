// The template constants a kernel's planned launch names (ops/cuda_rows.h), as numbers: what the
// row kernels' plan tests compare (booleans as 0 and 1).
#pragma once

#include <map>
#include <string>
#include <variant>

#include "ops/cuda_rows.h"

namespace mlx_ep {

inline std::map<std::string, int> Ints(const KernelLaunch& plan) {
  std::map<std::string, int> ints;
  for (const auto& [name, value] : plan.constants) {
    if (const int* i = std::get_if<int>(&value)) ints[name] = *i;
    if (const bool* b = std::get_if<bool>(&value)) ints[name] = *b ? 1 : 0;
  }
  return ints;
}

}  // namespace mlx_ep
