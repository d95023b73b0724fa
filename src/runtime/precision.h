// TF32 for float32 matrix products. MLX uses it where the hardware has it (CUDA GPUs, Apple M5
// GPUs) unless MLX_ENABLE_TF32=0, a variable MLX reads once per process, at its first such
// product. The EP's default is off (src/abi/entry.cc: float32 nodes give float32-exact results);
// the provider option `use_tf32` (ORT's CUDA EP's name for it) turns it on, process-wide.
#pragma once

#include <string>

namespace mlx_ep {

/** Provider option key, without ORT's "ep.mlxexecutionprovider." prefix. */
constexpr const char* kUseTf32Option = "use_tf32";

/** Applies a session's `use_tf32` value ("1"/"0"): "" when applied, or when it is what MLX runs
 *  with already; else why not (a bad value, or the other setting after MLX has started). */
std::string RequestTf32(const std::string& value);

/** To be called before the EP's first MLX evaluation: MLX may read MLX_ENABLE_TF32 from then on. */
void NoteMlxStarted();

}  // namespace mlx_ep
