// Op family: block-quantized weights, com.microsoft MatMulNBits (GatherBlockQuantized lives in
// quantized_gather.cc).
//
// MatMulNBits: Y = A @ dequantize(B)^T (+ bias), B: [N, k_blocks, blob] uint8 holding, per output
// column n and block of `block_size` values along K, the `bits`-wide unsigned values packed low bits
// first; weights w = (q - zero_point) * scale. ORT's CPU EP computes in float32 for every
// accuracy_level but 4 (float16 A, scales and bias are widened to float32 and the result rounded
// once); we do the same.
//  - MLX's CPU stream: nbits_cpu (quantized_cpu.cc), a custom primitive whose AVX-512 / AVX2
//    kernels read ORT's bytes in place, for up to nbits_cpu::kKernelMaxRows rows of A; more rows
//    run a BLAS GEMM per panel of columns dequantized into a cache-sized buffer (PanelGemm), or,
//    without the EP's OpenBLAS shim, dequantize B whole per run (another nbits_cpu primitive)
//    for one mx::matmul.
//    accuracy_level 4 (genai's default for the CPU EP): ORT's CPU EP then quantizes A to int8 per
//    block (MLAS CompInt8) when B is a constant and the zero points are packed; nbits_cpu
//    reproduces that for 4 bits, at every row count. Other level-4 cases are declined.
//  - GPU streams, by the number of rows of A: up to kNBitsKernelMaxRows on MLX's CUDA backend,
//    one custom kernel in float32 (quantized_cuda.cc). Otherwise (Metal; measured on x86,
//    bench/bench_matmulnbits.py): few rows (decode): mx::quantized_matmul reads B in place. On a
//    little-endian machine ORT's bytes reinterpret as MLX's uint32 words (element i of a word at bits
//    [bits*i, bits*(i+1)), low nibble of the first byte first), so B is only viewed; MLX's affine form w =
//    scale * q + bias takes bias = -(scale * zero_point). Needs MLX's group sizes (32/64/128). More rows
//    (prefill): B is unpacked and dequantized as ORT does, (q - zp) * scale in float32 (q * scale - scale *
//    zp for float zero points, ORT's formula there), then one GEMM: float32, or for a float16/bfloat16 A one
//    in A's type over B split in two (HalfPrefillMode).
// K not a multiple of block_size: the last block is padded; A is padded with zeros to match.
// Declined: accuracy_level 4 on GPUs, with bits 2/8, float zero points or B not a constant; g_idx,
// prepacked weights, float zero points of another type than A or with bits != 4 (no ORT CPU kernel).
#include <bit>

#include "common/env.h"
#include "ops/claim_util.h"
#include "ops/fused_gpu_internal.h"
#include "ops/matmul_internal.h"
#include "ops/quantized_cpu.h"
#include "ops/quantized_internal.h"
#include "ops/registry.h"

namespace mlx_ep {

mx::array UnpackBits(const mx::array& packed, int bits, mx::Stream s) {
  if (bits == 8) return packed;
  const int per_byte = 8 / bits;
  std::vector<uint8_t> shift_values;
  for (int i = 0; i < per_byte; ++i) shift_values.push_back(static_cast<uint8_t>(i * bits));
  const mx::array shifts(shift_values.begin(), {per_byte}, mx::uint8);
  const mx::array mask(static_cast<uint8_t>((1 << bits) - 1), mx::uint8);
  mx::array fields = mx::bitwise_and(mx::right_shift(mx::expand_dims(packed, -1, s), shifts, s), mask, s);
  mx::Shape shape = packed.shape();
  shape.back() *= per_byte;
  return mx::reshape(fields, shape, s);
}

namespace {

// Rows of A up to which mx::quantized_matmul beats dequantize + GEMM on MLX's CPU (measured with
// bench/bench_matmulnbits.py: its cost grows with every row, the dequantization is paid once).
constexpr int64_t kQuantizedMatmulMaxRows = 2;

struct NBits {
  int64_t K, N, bits, block_size, k_blocks, blob;
};

NBits ReadNBits(const Node& n) {
  NBits a{};
  a.K = n.AttrInt("K", 0);
  a.N = n.AttrInt("N", 0);
  a.bits = n.AttrInt("bits", 4);
  a.block_size = n.AttrInt("block_size", 0);
  a.k_blocks = a.block_size > 0 ? (a.K + a.block_size - 1) / a.block_size : 0;
  a.blob = a.block_size * a.bits / 8;
  return a;
}

bool ShapeIs(const NodeView& v, size_t i, std::initializer_list<std::vector<int64_t>> allowed) {
  auto shape = v.input_shape(i);
  if (!shape) return true;  // checked on the real shape when tracing
  for (const auto& a : allowed)
    if (a.size() == shape->size() &&
        std::equal(a.begin(), a.end(), shape->begin(), [](int64_t x, int64_t y) { return y < 0 || x == y; }))
      return true;
  return false;
}

/** accuracy_level 4: ORT's CPU EP quantizes A to int8 per block (MLAS CompInt8) when it has a
 *  kernel for the case and has prepacked B; nbits_cpu reproduces that on MLX's CPU device. */
Claim ClaimInt8A(const NodeView& v, const NBits& a) {
  if (RuntimeDevice() != mx::Device(mx::Device::cpu))
    return Claim::No("accuracy_level=4 (int8 A, MLAS CompInt8) is reproduced on MLX's CPU device only");
#if !(defined(__x86_64__) || defined(_M_X64))
  // Checked against ORT's x86-64 MLAS only; its Arm kernels quantize A with their own code.
  return Claim::No(
      "accuracy_level=4 (int8 A) is reproduced as ORT's x86-64 kernels compute it; not on this CPU");
#endif
  if (a.bits != 4)
    return Claim::No("accuracy_level=4 with bits=" + std::to_string(a.bits) + " (int8 A) not reproduced");
  // ORT prepacks B, scales and zero points for CompInt8 only when they are constants.
  if (!v.is_constant_input(1) || !v.is_constant_input(2) || (v.has_input(3) && !v.is_constant_input(3)))
    return Claim::No(
        "accuracy_level=4 with B, scales or zero points not constants (ORT does not prepack them)");
  if (v.has_input(3) && v.input_type(3) != ElemType::kUInt8)
    return Claim::No("accuracy_level=4 with float zero points (ORT then computes in float32 unpacked)");
  return Claim::Yes();
}

Claim ClaimMatMulNBits(const NodeView& v) {
  const Node& n = v.node();
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != ElemType::kUInt8) return Claim::No(TypeReason(v, 1, "B must be uint8"));
  if (v.input_type(2) != t) return Claim::No("scales type differs from A");
  if (v.output_type(0) != t) return Claim::No("output type differs from A");
  const NBits a = ReadNBits(n);
  if (a.bits != 2 && a.bits != 4 && a.bits != 8) return Claim::No("bits=" + std::to_string(a.bits));
  if (a.block_size < 16 || !std::has_single_bit(static_cast<uint64_t>(a.block_size)))
    return Claim::No("block_size=" + std::to_string(a.block_size) + " is not a power of 2 >= 16");
  if (a.K <= 0 || a.N <= 0) return Claim::No("K and N must be positive");
  const int64_t level = n.AttrInt("accuracy_level", 0);
  if (level < 0 || level > 4) return Claim::No("accuracy_level=" + std::to_string(level));
  if (level == 4) {
    if (Claim no = ClaimInt8A(v, a); !no.ok) return no;
  }
  if (n.AttrInt("weight_prepacked", 0) != 0)
    return Claim::No("weight_prepacked (an EP-specific layout of B)");
  if (v.has_input(4)) return Claim::No("g_idx (deprecated act-order reordering of K) is not supported");
  if (!ShapeIs(v, 1, {{a.N, a.k_blocks, a.blob}})) return Claim::No("B is not [N, k_blocks, blob_size]");
  if (!ShapeIs(v, 2, {{a.N, a.k_blocks}, {a.N * a.k_blocks}}))
    return Claim::No("scales is not [N, k_blocks]");
  if (v.has_input(3)) {
    const ElemType zt = v.input_type(3);
    if (zt == ElemType::kUInt8) {
      const int64_t zb = (a.k_blocks * a.bits + 7) / 8;
      if (!ShapeIs(v, 3, {{a.N, zb}, {a.N * zb}}))
        return Claim::No("packed zero_points is not [N, ceil(k_blocks * bits / 8)]");
    } else {
      if (zt != t) return Claim::No("float zero_points of another type than A (no ORT CPU kernel)");
      if (a.bits != 4) return Claim::No("float zero_points with bits != 4 (ORT's CPU kernel rejects them)");
      if (!ShapeIs(v, 3, {{a.N, a.k_blocks}, {a.N * a.k_blocks}}))
        return Claim::No("zero_points is not [N, k_blocks]");
    }
  }
  if (v.has_input(5)) {
    if (v.input_type(5) != t) return Claim::No("bias type differs from A");
    if (!ShapeIs(v, 5, {{a.N}})) return Claim::No("bias is not [N]");
  }
  if (auto r = v.input_rank(0); r && *r < 1) return Claim::No("A must have rank >= 1");
  return Claim::Yes();
}

/** zero_points as the op gives them (packed uint8 or A's float type), their size checked. */
std::optional<mx::array> RawZeroPoints(const OpContext& c, const NBits& a) {
  if (!c.has_input(3)) return std::nullopt;
  const mx::array& z = c.input(3);
  const size_t expected = z.dtype() == mx::uint8 ? static_cast<size_t>(a.N * ((a.k_blocks * a.bits + 7) / 8))
                                                 : static_cast<size_t>(a.N * a.k_blocks);
  if (z.size() != expected)
    c.Fail("zero_points has " + std::to_string(z.size()) + " values, expected " + std::to_string(expected));
  return z;
}

/** B as [N, k_blocks, blob] (the op's shape; a view of a flat B). */
mx::array PackedB(const OpContext& c, const NBits& a, mx::Stream s) {
  return mx::reshape(c.input(1),
                     {static_cast<int>(a.N), static_cast<int>(a.k_blocks), static_cast<int>(a.blob)}, s);
}

/** Zero points as float32 [N, k_blocks] (unpacked from uint8), or nullopt when absent. */
std::optional<mx::array> ZeroPoints(const OpContext& c, const NBits& a, mx::Stream s) {
  const std::optional<mx::array> raw = RawZeroPoints(c, a);  // its size checked
  if (!raw) return std::nullopt;
  const mx::array& z = *raw;
  if (z.dtype() != mx::uint8)
    return mx::astype(mx::reshape(z, {static_cast<int>(a.N), static_cast<int>(a.k_blocks)}, s), mx::float32,
                      s);
  const int zb = static_cast<int>((a.k_blocks * a.bits + 7) / 8);
  mx::array q = UnpackBits(mx::reshape(z, {static_cast<int>(a.N), zb}, s), static_cast<int>(a.bits), s);
  q = mx::slice(q, {0, 0}, {static_cast<int>(a.N), static_cast<int>(a.k_blocks)}, s);
  return mx::astype(q, mx::float32, s);
}

/** (q - zp) * scale as ORT's CPU EP computes it: [N, k_blocks * block_size] float32. */
mx::array DequantizedB(const OpContext& c, const NBits& a, const mx::array& scales,
                       const std::optional<mx::array>& zp, mx::Stream s) {
  const int N = static_cast<int>(a.N), kb = static_cast<int>(a.k_blocks), bs = static_cast<int>(a.block_size);
  const mx::array q = mx::astype(UnpackBits(PackedB(c, a, s), static_cast<int>(a.bits), s), mx::float32, s);
  const mx::array scale = mx::expand_dims(scales, -1, s);
  mx::array w = [&] {
    if (zp && c.input(3).dtype() != mx::uint8)  // ORT: q * scale + (-scale * zp)
      return mx::add(mx::multiply(q, scale, s),
                     mx::expand_dims(mx::negative(mx::multiply(scales, *zp, s), s), -1, s), s);
    const mx::array z =
        zp ? mx::expand_dims(*zp, -1, s) : mx::array(static_cast<float>(1 << (a.bits - 1)), mx::float32);
    return mx::multiply(mx::subtract(q, z, s), scale, s);  // q - zp is exact
  }();
  return mx::reshape(w, {N, kb * bs}, s);
}

/** x [M, K] @ B^T through mx::quantized_matmul on ORT's bytes viewed as MLX's uint32 words. */
mx::array QuantizedMatmul(const OpContext& c, const NBits& a, const mx::array& x, const mx::array& scales,
                          const std::optional<mx::array>& zp, mx::Stream s) {
  const int N = static_cast<int>(a.N);
  const int row_bytes = static_cast<int>(a.k_blocks * a.blob);
  const mx::array w = mx::view(mx::reshape(c.input(1), {N, row_bytes}, s), mx::uint32, s);
  const mx::array z = zp ? *zp : mx::array(static_cast<float>(1 << (a.bits - 1)), mx::float32);
  const mx::array biases = mx::negative(mx::multiply(scales, z, s), s);
  return mx::quantized_matmul(x, w, scales, biases, true, static_cast<int>(a.block_size),
                              static_cast<int>(a.bits), "affine", s);
}

/** How a GPU prefill (more rows than QuantizedMatmulFits takes) multiplies a float16/bfloat16 A
 *  by the dequantized B (float32, exact), ONNXRUNTIME_EP_MLX_NBITS_PREFILL:
 *  - unset / "split": B as the sum of two numbers of A's type, hi = B rounded and lo = (B - hi)
 *    rounded, and one GEMM in A's type with float32 sums (MLX's CUDA GEMMs: CUBLAS_COMPUTE_32F)
 *    of [A, A] by [hi, lo] (2K wide): B to ~2^-22 relative for float16 (2^-16 bfloat16), float32's
 *    accuracy, at the tensor cores' speed. A float32 GEMM runs without them (TF32 off): a TinyLlama
 *    int4 prefill of 512 tokens took 50 ms so on the H200, against genai-cuda's 5.9;
 *  - "half": one GEMM of A by B rounded to A's type (ORT's CUDA EP's way): half the work, but not
 *    exact against ORT's CPU EP everywhere (with float zero points and outputs that cancel, 2 of
 *    test_quantized's 84 float16 cases differ by up to 4.8e-3 relative; its tolerance is 1e-3);
 *  - "float32": the float32 GEMM.
 *  None of them measured on a GPU yet. */
enum class HalfPrefill { kSplit, kHalf, kFloat32 };

HalfPrefill HalfPrefillMode() {
  static const HalfPrefill mode = [] {
    const std::string v = EnvString(env::kNbitsPrefill);
    return v == "half" ? HalfPrefill::kHalf : v == "float32" ? HalfPrefill::kFloat32 : HalfPrefill::kSplit;
  }();
  return mode;
}

/** x [..., K] (A's half type) times w^T, w [N, K] float32, as HalfPrefillMode says. */
mx::array HalfPrefillProduct(const mx::array& x, const mx::array& w, mx::Stream s) {
  const mx::Dtype t = x.dtype();
  const mx::array hi = mx::astype(w, t, s);
  if (HalfPrefillMode() == HalfPrefill::kHalf) return FlatFreeMatmul(x, mx::transpose(hi, s), s);
  const mx::array lo = mx::astype(mx::subtract(w, mx::astype(hi, mx::float32, s), s), t, s);
  const mx::array pair = mx::concatenate({hi, lo}, 1, s);  // [N, 2K]
  return FlatFreeMatmul(mx::concatenate({x, x}, -1, s), mx::transpose(pair, s), s);
}

/** A GPU prefill whose B one custom kernel dequantizes (NBitsDequantizeKernelWanted) into what
 *  `mode` multiplies: a2 is A as [rows, K] (or its own unit-batch shape), x the same in float32. */
mx::array PrefillByKernel(const OpContext& c, const NBits& a, const mx::array& a2, const mx::array& x,
                          HalfPrefill mode, mx::Stream s) {
  const mx::array b = PackedB(c, a, s);
  const NBitsDequantized out = mode == HalfPrefill::kSplit  ? NBitsDequantized::kSplit
                               : mode == HalfPrefill::kHalf ? NBitsDequantized::kHalf
                                                            : NBitsDequantized::kFloat32;
  const mx::array w = NBitsDequantizeKernel(b, c.input(2), RawZeroPoints(c, a), static_cast<int>(a.K),
                                            static_cast<int>(a.bits), static_cast<int>(a.block_size), out, s);
  if (mode == HalfPrefill::kSplit)
    return FlatFreeMatmul(mx::concatenate({a2, a2}, -1, s), mx::transpose(w, s), s);
  return FlatFreeMatmul(mode == HalfPrefill::kHalf ? a2 : x, mx::transpose(w, s), s);
}

bool QuantizedMatmulFits(const NBits& a, int64_t rows) {
  const bool mlx_group = a.block_size == 32 || a.block_size == 64 || a.block_size == 128;
  return rows <= kQuantizedMatmulMaxRows && mlx_group && std::endian::native == std::endian::little;
}

/** A GPU decode (few rows): one custom kernel reads ORT's bytes, scales and zero points as they
 *  are and computes in float32 (quantized_cuda.cc); A in its own shape. */
mx::array TranslateByKernel(const OpContext& c, const NBits& a, const mx::array& A) {
  const mx::Stream s = c.stream;
  const mx::array b = PackedB(c, a, s);
  const std::optional<mx::array> bias = c.has_input(5) ? std::optional<mx::array>(c.input(5)) : std::nullopt;
  return NBitsRowsKernel(A, b, c.input(2), RawZeroPoints(c, a), bias, static_cast<int>(a.bits),
                         static_cast<int>(a.block_size), s);
}

/** The CPU stream: one nbits_cpu primitive reads B in place (quantized_cpu.cc). */
mx::array TranslateOnCpu(const OpContext& c, const NBits& a, const mx::array& A, const mx::array& scales,
                         const mx::Shape& out_shape) {
  const mx::Stream s = c.stream;
  const int rows = static_cast<int>(A.size() / a.K);
  nbits_cpu::NBitsShape shape;
  shape.K = static_cast<int>(a.K);
  shape.N = static_cast<int>(a.N);
  shape.bits = static_cast<int>(a.bits);
  shape.block_size = static_cast<int>(a.block_size);
  shape.k_blocks = static_cast<int>(a.k_blocks);
  shape.int8_a = c.node.AttrInt("accuracy_level", 0) == 4;
  std::optional<mx::array> zp = RawZeroPoints(c, a);
  if (zp && zp->dtype() != mx::uint8) zp = mx::astype(*zp, mx::float32, s);  // the kernels index flat
  std::optional<mx::array> bias;
  if (c.has_input(5)) bias = mx::astype(c.input(5), mx::float32, s);
  // The primitive takes A in its own shape ([..., K] -> [..., N]): no Reshape around it.
  const mx::array x = mx::astype(A, mx::float32, s);
  mx::array y = [&] {
    if (rows <= nbits_cpu::kKernelMaxRows || shape.int8_a || nbits_cpu::PanelGemmAvailable())
      return nbits_cpu::MatMulNBits(x, c.input(1), scales, zp, bias, shape, s);
    const mx::array w = nbits_cpu::Dequantize(c.input(1), scales, zp, shape, s);
    mx::array xw = mx::matmul(mx::reshape(x, {rows, shape.K}, s),
                              mx::transpose(mx::slice(w, {0, 0}, {shape.N, shape.K}, s), s), s);
    return bias ? mx::add(xw, *bias, s) : xw;
  }();
  y = mx::astype(y, A.dtype(), s);
  return mx::reshape(y, out_shape, s);  // the array itself when the shape is out_shape already
}

std::vector<mx::array> TranslateMatMulNBits(const OpContext& c) {
  const mx::Stream s = c.stream;
  const NBits a = ReadNBits(c.node);
  const mx::array& A = c.input(0);
  if (A.ndim() < 1 || A.shape(-1) != a.K) c.Fail("A's last dimension must be K=" + std::to_string(a.K));
  if (c.input(1).size() != static_cast<size_t>(a.N * a.k_blocks * a.blob))
    c.Fail("B must be [N, k_blocks, blob_size]");
  if (c.input(2).size() != static_cast<size_t>(a.N * a.k_blocks)) c.Fail("scales must be [N, k_blocks]");
  if (c.has_input(5) && c.input(5).size() != static_cast<size_t>(a.N)) c.Fail("bias must be [N]");
  mx::Shape out_shape = A.shape();
  out_shape.back() = static_cast<int>(a.N);
  const int64_t rows = static_cast<int64_t>(A.size()) / a.K;
  if (rows == 0) return {mx::zeros(out_shape, A.dtype(), s)};

  const int N = static_cast<int>(a.N), K = static_cast<int>(a.K);
  const mx::array scales =
      mx::astype(mx::reshape(c.input(2), {N, static_cast<int>(a.k_blocks)}, s), mx::float32, s);
  // ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS=force: the GPU translation on MLX's CPU device (tests of
  // it, and of what ConstantFolder folds there), but accuracy_level 4, which only the CPU kernels do.
  const bool level4 = c.node.AttrInt("accuracy_level", 0) == 4;
  if (s.device == mx::Device::cpu && (!FusedGpuPathsOnCpu() || level4))
    return {TranslateOnCpu(c, a, A, scales, out_shape)};
  if (level4) c.Fail("accuracy_level=4 runs on MLX's CPU device only");
  if (NBitsKernelWanted(rows, s)) return {TranslateByKernel(c, a, A)};
  const std::optional<mx::array> zp = ZeroPoints(c, a, s);
  // A with batch dims of 1 (a decode step's [1, 1, K]) in its own shape: MLX's products take it
  // as the same [rows, K] GEMM, and a run has no Reshape pair around them (two primitives per
  // MatMulNBits). Other batches stay [rows, K]: MLX's CUDA qmm picks its kernel by M and batch.
  const bool unit_batch = A.ndim() >= 2 && HasUnitBatch(A);
  mx::array x = mx::astype(unit_batch ? A : mx::reshape(A, {static_cast<int>(rows), K}, s), mx::float32, s);
  mx::array y = [&] {
    if (QuantizedMatmulFits(a, rows)) {
      const int padded = static_cast<int>(a.k_blocks * a.block_size);
      if (padded != K) {
        std::vector<std::pair<int, int>> widths(x.ndim(), {0, 0});
        widths.back() = {0, padded - K};
        x = mx::pad(x, widths, mx::array(0.f), "constant", s);
      }
      return QuantizedMatmul(c, a, x, scales, zp, s);
    }
    const bool half = A.dtype() == mx::float16 || A.dtype() == mx::bfloat16;
    const HalfPrefill mode = half ? HalfPrefillMode() : HalfPrefill::kFloat32;  // see HalfPrefillMode
    const mx::array a2 = unit_batch ? A : mx::reshape(A, {static_cast<int>(rows), K}, s);
    if (NBitsDequantizeKernelWanted(s)) return PrefillByKernel(c, a, a2, x, mode, s);
    const mx::array w = mx::slice(DequantizedB(c, a, scales, zp, s), {0, 0}, {N, K}, s);
    if (mode != HalfPrefill::kFloat32) return HalfPrefillProduct(a2, w, s);
    return FlatFreeMatmul(x, mx::transpose(w, s), s);
  }();
  if (c.has_input(5)) y = mx::add(y, mx::astype(c.input(5), mx::float32, s), s);
  return {mx::reshape(mx::astype(y, A.dtype(), s), out_shape, s)};
}

}  // namespace

void RegisterQuantizedOps(OpRegistry& r) {
  r.Add({"com.microsoft", "MatMulNBits", 1, 1, ClaimMatMulNBits, TranslateMatMulNBits});
  RegisterQuantizedGatherOps(r);
}

}  // namespace mlx_ep
