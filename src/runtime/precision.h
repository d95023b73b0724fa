// MLX's process-wide settings, variables MLX reads once per process.
// TF32 for float32 matrix products: MLX uses it where the hardware has it (CUDA GPUs, Apple M5
// GPUs) unless MLX_ENABLE_TF32=0, read at its first such product. The EP's default is off
// (SetMlxDefaults: float32 nodes give float32-exact results); the provider option `use_tf32`
// (ORT's CUDA EP's name for it) turns it on, process-wide.
// The size of MLX's CUDA graphs (MLX_MAX_OPS_PER_BUFFER): see kCudaOpsPerGraph.
#pragma once

#include <string>

namespace mlx_ep {

/** The operations MLX's CUDA backend puts in one CUDA graph, the EP's default. MLX's own is 100 on
 *  Hopper and Blackwell (20 on the A100; mlx/backend/cuda/device.cpp, get_graph_limits): a
 *  TinyLlama decode step (~300 kernels) was then three graphs, each launched only once its 100
 *  operations were encoded, so the GPU started late and ran the last ~100 kernels after the host
 *  had finished (a step waited 1.3-1.9 ms after its last launch in the H100's timelines). A fp16
 *  decode step on an H100, medians of two rounds in alternating order (docs/performance.md,
 *  twenty-eighth session): 100 -> 4.00 ms; 25 -> 3.67 and 3.61; 10 -> 3.47, 50 -> 3.45 (one A/B
 *  each: 10, 25 and 50 within its spread). */
constexpr const char* kCudaOpsPerGraph = "25";

/** Sets MLX's variables the EP changes unless the user set them: MLX_ENABLE_TF32=0 and, where MLX
 *  is its CUDA backend, MLX_MAX_OPS_PER_BUFFER=kCudaOpsPerGraph. Before any MLX work (the plugin
 *  library's CreateEpFactories): a process that ran MLX before keeps what MLX read then. */
void SetMlxDefaults();

/** Provider option key, without ORT's "ep.mlxexecutionprovider." prefix. */
constexpr const char* kUseTf32Option = "use_tf32";

/** Applies a session's `use_tf32` value ("1"/"0"): "" when applied, or when it is what MLX runs
 *  with already; else why not (a bad value, or the other setting after MLX has started). */
std::string RequestTf32(const std::string& value);

/** To be called before the EP's first MLX evaluation: MLX may read MLX_ENABLE_TF32 from then on. */
void NoteMlxStarted();

}  // namespace mlx_ep
