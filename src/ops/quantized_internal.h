// Shared by the block-quantized op families (quantized.cc, quantized_gather.cc).
#pragma once

#include <optional>

#include "ops/op.h"

namespace mlx_ep {

/** Splits each byte of `packed` ([..., n] uint8) into its 8 / bits fields of `bits` bits, low
 *  bits first (ORT's packing): [..., n * 8 / bits] uint8. bits is 2, 4 or 8. */
mx::array UnpackBits(const mx::array& packed, int bits, mx::Stream s);

/** Rows of A up to which a GPU MatMulNBits runs NBitsRowsKernel (decode, batched decode). */
constexpr int64_t kNBitsKernelMaxRows = 8;

/** Whether a MatMulNBits of `rows` rows of A on stream `s` takes NBitsRowsKernel: MLX's CUDA
 *  backend, rows <= kNBitsKernelMaxRows, and ONNXRUNTIME_EP_MLX_NBITS_KERNEL not "0". */
bool NBitsKernelWanted(int64_t rows, mx::Stream s);

/** True unless ONNXRUNTIME_EP_MLX_NBITS_WIDE=0: NBitsRowsKernel reads B 16 bytes a lane and, where K is a
 *  whole number of B's 32-bit words, a word's values of x in one vector (its WIDE constant). */
bool NBitsWideLoads();

/** x [..., K] (float32/float16/bfloat16, rows = size / K <= kNBitsKernelMaxRows) times
 *  dequantize(b)^T (+ bias) in one custom CUDA kernel (quantized_cuda.cc), ORT's CPU EP's float32
 *  arithmetic: b [N, k_blocks, blob] uint8 as ORT packs it, scales [N, k_blocks] in x's type,
 *  zero points packed uint8 or in x's type (absent: 2^(bits-1)), bias [N] in x's type.
 *  Returns [..., N] in x's type. */
mx::array NBitsRowsKernel(const mx::array& x, const mx::array& b, const mx::array& scales,
                          const std::optional<mx::array>& zero_points, const std::optional<mx::array>& bias,
                          int bits, int block_size, mx::Stream s);

/** What NBitsDequantizeKernel writes: the float32 weight [N, K]; it rounded to the scales'
 *  type [N, K]; or hi and lo of that type side by side [N, 2K] (w = hi + lo to ~2^-22). */
enum class NBitsDequantized { kFloat32 = 0, kHalf = 1, kSplit = 2 };

/** Whether a GPU MatMulNBits prefill (more rows than NBitsKernelWanted takes) dequantizes B in
 *  one custom kernel: MLX's CUDA backend, unless ONNXRUNTIME_EP_MLX_NBITS_KERNEL is "0" or "1"
 *  (then MLX ops unpack and dequantize it). */
bool NBitsDequantizeKernelWanted(mx::Stream s);

/** B (as NBitsRowsKernel takes it) dequantized as ORT's CPU EP does, w = (q - zp) * scale in
 *  float32, the first K values of each row, in one custom CUDA kernel (quantized_cuda.cc). */
mx::array NBitsDequantizeKernel(const mx::array& b, const mx::array& scales,
                                const std::optional<mx::array>& zero_points, int K, int bits, int block_size,
                                NBitsDequantized out, mx::Stream s);

/** The kernels' device code as NVRTC compiles it (header and bodies), for a host-compile test. */
const char* NBitsKernelSourceForTests();
const char* NBitsDequantizeSourceForTests();

class OpRegistry;
/** GatherBlockQuantized (quantized_gather.cc), registered by RegisterQuantizedOps. */
void RegisterQuantizedGatherOps(OpRegistry& r);

}  // namespace mlx_ep
