// Reading the ONNXRUNTIME_EP_MLX_* environment variables, in one place.
#pragma once

#include <cstdlib>
#include <string>

namespace mlx_ep {

/** The value of environment variable `name`, or `fallback` when unset. */
inline std::string EnvString(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

/** True when `name` is set to something other than "", "0", "false" or "off". */
inline bool EnvFlag(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  return !(s.empty() || s == "0" || s == "false" || s == "off" || s == "OFF");
}

/** True when `name` is set to "", "0", "false" or "off": a switch that is on unless turned off. */
inline bool EnvOff(const char* name) { return std::getenv(name) && !EnvFlag(name); }

/** Sets environment variable `name` to `value`. */
inline void SetEnv(const char* name, const char* value) {
#if defined(_WIN32)
  _putenv_s(name, value);
#else
  setenv(name, value, /*overwrite=*/1);
#endif
}

/** Sets environment variable `name` to `value` unless the user already set it. */
inline void SetEnvDefault(const char* name, const char* value) {
  if (!std::getenv(name)) SetEnv(name, value);
}

namespace env {
constexpr const char* kVerbose = "ONNXRUNTIME_EP_MLX_VERBOSE";         // per-session summary on stderr
constexpr const char* kClaimDebug = "ONNXRUNTIME_EP_MLX_CLAIM_DEBUG";  // declined nodes with reasons
constexpr const char* kNoCompile = "ONNXRUNTIME_EP_MLX_NO_COMPILE";    // run traced graphs eagerly
constexpr const char* kReportPath = "ONNXRUNTIME_EP_MLX_REPORT";       // write the claim report JSON here
constexpr const char* kDevice = "ONNXRUNTIME_EP_MLX_DEVICE";           // "cpu" or "gpu" (default: gpu if any)
constexpr const char* kCpuCacheMb =
    "ONNXRUNTIME_EP_MLX_CPU_CACHE_MB";  // MLX's CPU buffer cache in MiB (default: a quarter of its
                                        // memory limit; MLX's own: 32)
constexpr const char* kDeclineOps = "ONNXRUNTIME_EP_MLX_DECLINE_OPS";  // comma-separated op types left to ORT
constexpr const char* kPromptBuckets =
    "ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS";  // smallest bucket a first prompt is padded to (0: off)
constexpr const char* kMaxCompiled =
    "ONNXRUNTIME_EP_MLX_MAX_COMPILED";  // compiled functions kept per partition
constexpr const char* kDeviceMemory =
    "ONNXRUNTIME_EP_MLX_DEVICE_MEMORY";  // "0": no GPU allocator/data transfer (default on GPUs); "force": on
                                         // CPU too
constexpr const char* kDeviceWrites =
    "ONNXRUNTIME_EP_MLX_DEVICE_WRITES";  // "0": outputs and in-place rows copied by the host, not a CUDA
                                         // kernel; "per-block": a kernel launch per block of rows;
                                         // "async": one wait a run (AsyncRunEvaluation; the
                                         // default on CUDA); "1": device writes, two waits
constexpr const char* kNoConstantFold =
    "ONNXRUNTIME_EP_MLX_NO_CONSTANT_FOLD";  // "1": constant subgraphs stay in the compiled graph
constexpr const char* kScalarInputs =
    "ONNXRUNTIME_EP_MLX_SCALAR_INPUTS";  // "0": a trace's scalar leaves stay behind Contiguous
                                         // primitives (runtime/scalars.h), not inputs
constexpr const char* kSpinMicros = "ONNXRUNTIME_EP_MLX_SPIN_US";  // hand-off spin bound (0: off)
constexpr const char* kMlxThreads = "ONNXRUNTIME_EP_MLX_THREADS";  // MLX worker threads (default: CPUs, <= 4)
constexpr const char* kBlasThreads =
    "ONNXRUNTIME_EP_MLX_BLAS_THREADS";  // BLAS threads (Linux, default: the CPUs of the process)
constexpr const char* kAttentionVjpDenseLimit =
    "ONNXRUNTIME_EP_MLX_ATTENTION_VJP_DENSE_LIMIT_BYTES";  // AttentionVJP score budget (64 MiB)
constexpr const char* kAttentionVjpKernel =
    "ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL";  // "1": CUDA kernels for the tiled AttentionVJP; "force":
                                                // try it on any device
constexpr const char* kGraphCensus =
    "ONNXRUNTIME_EP_MLX_GRAPH_CENSUS";  // log the MLX primitives a run evaluates, by name ("graph": and the
                                        // graph)
constexpr const char* kDecodeAttention =
    "ONNXRUNTIME_EP_MLX_DECODE_ATTENTION";  // "gemv": GQA decode core as float32 one-row products (GPU
                                            // paths); "sdpa": cuDNN's masked attention; "kernel"
                                            // (default): the whole decode step as one custom
                                            // CUDA kernel (attention_gqa_cuda.cc)
constexpr const char* kPrefetchInputs =
    "ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS";  // host inputs ORT copies into the EP's CUDA memory:
                                           // copied by the CUDA driver (default, "copy"); "1": a host
                                           // memcpy, then moved by DMA; "0": a host memcpy alone
                                           // (runtime/cuda_prefetch.h)
constexpr const char* kDecodeThreads =
    "ONNXRUNTIME_EP_MLX_DECODE_THREADS";  // "128" or "256": the decode-step kernel's block (default
                                          // 512 since the twenty-seventh session; attention_gqa_cuda.cc)
constexpr const char* kHeadsLastKernel =
    "ONNXRUNTIME_EP_MLX_HEADS_LAST_KERNEL";  // "0": the fused attention core's [B, S, H, D] output
                                             // as MLX's select, not the one custom CUDA kernel of
                                             // the default (attention_gqa_prefill.h)
constexpr const char* kPrefillRotateKernel =
    "ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL";  // "0": a prompt's rotary Q/K (and V's layout) as
                                                 // MLX operations, not the one custom CUDA kernel
                                                 // of the default (attention_gqa_prefill.h)
constexpr const char* kDecodeGrouped =
    "ONNXRUNTIME_EP_MLX_DECODE_GROUPED";  // "1": the decode-step kernel a block per (entry, KV head,
                                          // split), the group's query heads together (opt-in;
                                          // attention_gqa_grouped_cuda.cc)
constexpr const char* kDecodeSplitRows =
    "ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS";  // N > 0: the decode-step kernel's past rows split in
                                             // blocks of N rows per query head (attention_gqa_cuda.cc)
constexpr const char* kNbitsPrefill =
    "ONNXRUNTIME_EP_MLX_NBITS_PREFILL";  // "split" (default), "half" or "float32": ops/quantized.cc
constexpr const char* kNbitsWide =
    "ONNXRUNTIME_EP_MLX_NBITS_WIDE";  // "0": MatMulNBits' kernels load and store one word a lane,
                                      // not the default's 16 bytes (quantized_cuda.cc)
constexpr const char* kNbitsKernel =
    "ONNXRUNTIME_EP_MLX_NBITS_KERNEL";  // "0": GPU MatMulNBits decode through mx::quantized_matmul;
                                        // "1": the decode kernel only; "all" (default): the
                                        // prefill's dequantization a kernel too
constexpr const char* kNormKernel =
    "ONNXRUNTIME_EP_MLX_NORM_KERNEL";  // "0": GPU row normalizations as MLX's fused kernels on
                                       // float32 values, not the EP's one-launch CUDA kernel of the
                                       // default (normalization_cuda.h)
constexpr const char* kSoftmaxKernel =
    "ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL";  // "0": GPU (Log)Softmax over the last axis as MLX's
                                          // composed kernels, not the EP's one-launch CUDA kernel
                                          // of the default (softmax_cuda.h)
constexpr const char* kRowsKernel =
    "ONNXRUNTIME_EP_MLX_ROWS_KERNEL";  // "1": GPU products of 2-8 rows by a gemv-layout constant
                                       // weight as the EP's CUDA kernel, not cuBLASLt (opt-in;
                                       // matmul_rows_cuda.h); "all": 1-8 rows (not MLX's gemv)
constexpr const char* kHeadsAttention =
    "ONNXRUNTIME_EP_MLX_HEADS_ATTENTION";  // "1": GPU Softmax(Q K^T scaled + mask) @ V over heads
                                           // as the EP's CUDA kernel (tensor cores for float16 and
                                           // bfloat16 on compute capability 8.0+), not two MLX
                                           // products and the softmax kernel (opt-in;
                                           // attention_heads_cuda.h); "rows": the CUDA-core kernel
                                           // (a warp a query row) for every type
constexpr const char* kNormAdd =
    "ONNXRUNTIME_EP_MLX_NORM_ADD";  // "1": on a GPU, a LayerNormalization whose input is an Add
                                    // only it reads takes the Add's operands into the norm kernel
                                    // (opt-in; normalization.cc, normalization_cuda.h)
constexpr const char* kMergeMatmuls =
    "ONNXRUNTIME_EP_MLX_MERGE_MATMULS";  // "0": MatMuls (and MatMulNBits) on one input stay one product each
constexpr const char* kMatmulBias =
    "ONNXRUNTIME_EP_MLX_MATMUL_BIAS";  // "0": a MatMul and the Add of its bias stay two ops
                                       // (runtime/matmul_bias.h)
constexpr const char* kGemvWeights =
    "ONNXRUNTIME_EP_MLX_GEMV_WEIGHTS";  // "auto" (default), "1", "0" or "force": runtime/weight_layout.h
constexpr const char* kNormCpuKernel =
    "ONNXRUNTIME_EP_MLX_NORM_CPU_KERNEL";  // "0": row normalizations composed on the CPU
                                           // (normalization_cpu.h)
constexpr const char* kConvCpuKernel =
    "ONNXRUNTIME_EP_MLX_CONV_CPU_KERNEL";  // "0": convolutions composed on the CPU, no primitive
                                           // of the EP's (ops/conv_*_cpu.cc) nor fused activation
constexpr const char* kPoolCpuKernel =
    "ONNXRUNTIME_EP_MLX_POOL_CPU_KERNEL";  // "0": float32 MaxPool composed on the CPU (ops/pool_cpu.cc)
constexpr const char* kRecurrentCpuKernel =
    "ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL";  // "0": RNN/GRU/LSTM time loops unrolled in MLX on the
                                                // CPU (ops/recurrent_cpu.cc); "portable": its
                                                // products without OpenBLAS (tests)
constexpr const char* kUnaryCpuKernel =
    "ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL";  // "0": float32 Exp, Sigmoid, Tanh, Erf, Gelu and
                                            // Softmax composed on the CPU (ops/unary_cpu.h)
constexpr const char* kReduceCpuKernel =
    "ONNXRUNTIME_EP_MLX_REDUCE_CPU_KERNEL";  // "0": float32 sums (Reduce*, the normalizations' and
                                             // pooling's means) composed on the CPU (reduction_cpu.h)
constexpr const char* kGqaCpuKernel =
    "ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL";  // "0": GroupQueryAttention composes MLX ops on the CPU too;
                                          // "portable": the kernel's portable loops (tests)
}  // namespace env

}  // namespace mlx_ep
