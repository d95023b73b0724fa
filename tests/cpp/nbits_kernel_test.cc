// MatMulNBits' CUDA kernels (src/ops/quantized_cuda.cc) compiled by nvcc for every template case
// the EP launches, in the wrapper MLX's cuda_kernel generates around it (parameters, then the
// constants it declares for template arguments), and run on the host through an emulation of
// CUDA's threads and warps (ValuesOnTheHostEmulation). tests/python/ops/test_quantized.py checks
// their values on a GPU against ORT's CPU EP.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "host_program.h"
#include "ops/quantized_internal.h"

namespace mlx_ep {
namespace {

std::string RowsBody() { return KernelBody(NBitsKernelSourceForTests()); }

// What MLX's generated kernel puts around the body (mlx/backend/cuda/custom_kernel.cpp).
std::string Wrapper(const std::string& name, const std::string& t, const std::string& z, int bits, int block,
                    int rows, int zp, bool bias, bool wide) {
  return "__global__ void " + name + "(const " + t + "* x, const __grid_constant__ Shape x_shape, " +
         "const __grid_constant__ int x_ndim, const uint8_t* b, const __grid_constant__ Shape b_shape, "
         "const " +
         t + "* scales, const " + z + "* zp, const " + t + "* bias, " + t + "* y) {\n" +
         "  constexpr int BITS = " + std::to_string(bits) +
         ";\n  constexpr int BLOCK = " + std::to_string(block) +
         ";\n  constexpr int ROWS = " + std::to_string(rows) +
         ";\n  constexpr int ZP = " + std::to_string(zp) +
         ";\n  constexpr bool HAS_BIAS = " + (bias ? "true" : "false") +
         ";\n  constexpr bool WIDE = " + (wide ? "true" : "false") + ";\n" + RowsBody() + "\n}\n";
}

// The dequantizing kernel's wrapper: inputs b, scales, zp; output w.
std::string DequantizeWrapper(const std::string& name, const std::string& t, const std::string& z,
                              const std::string& o, int bits, int block, int zp, int out, bool wide) {
  return "__global__ void " + name + "(const uint8_t* b, const __grid_constant__ Shape b_shape, const " + t +
         "* scales, const " + z + "* zp, " + o + "* w) {\n  constexpr int BITS = " + std::to_string(bits) +
         ";\n  constexpr int BLOCK = " + std::to_string(block) +
         ";\n  constexpr int K = 100;\n  constexpr int ZP = " + std::to_string(zp) +
         ";\n  constexpr int OUT = " + std::to_string(out) +
         ";\n  constexpr bool WIDE = " + (wide ? "true" : "false") + ";\n" + NBitsDequantizeSourceForTests() +
         "\n}\n";
}

TEST(NBitsKernel, CompilesForEveryCase) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(KernelHeader(NBitsKernelSourceForTests()));
  int count = 0;
  std::map<std::string, int> threads;  // a kernel's block
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int bits : {2, 4, 8})
      for (int zp : {0, 1, 2}) {
        if (zp == 2 && bits != 4) continue;  // the claim's rule
        const std::string z = zp == 2 ? t : "uint8_t";
        for (int rows : {1, 8})
          for (bool bias : {false, true})
            for (bool wide : {false, true}) {             // ONNXRUNTIME_EP_MLX_NBITS_WIDE
              if (wide && bias != (rows == 8)) continue;  // wide: the least and the most registers
              std::string name = "k";                     // not "k" + ...: GCC 12's -Wrestrict false positive
              name += std::to_string(count++);
              threads[name] = 128;  // quantized_cuda.cc: four columns a block
              text += Wrapper(name, t, z, bits, bits == 2 ? 16 : 32, rows, zp, bias, wide);
            }
      }
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int bits : {2, 4, 8})
      for (int zp : {0, 1, 2}) {
        if (zp == 2 && bits != 4) continue;
        const std::string z = zp == 2 ? t : "uint8_t";
        for (int out : {0, 1, 2})
          for (bool wide : {false, true}) {  // ONNXRUNTIME_EP_MLX_NBITS_WIDE: stores of 16 bytes
            if (out != 0 && std::string(t) == "float") continue;  // float32 A: the float32 weight
            std::string name = "d";
            name += std::to_string(count++);
            threads[name] = 256;  // kDequantizeThreads
            text += DequantizeWrapper(name, t, z, out == 0 ? "float" : t, bits, bits == 2 ? 16 : 32, zp, out,
                                      wide);
          }
      }
  text += kMlxKernelsEnd;
  EXPECT_GT(count, 60);
  EXPECT_EQ(CompileLikeMlx("mlx_ep_nbits_kernel_test", text, threads), "");
}

// The kernels' own text run on the host (tests/cpp/cuda_host_emulation.h): every dequantized value
// bit for bit against ORT's formula, the products to float32's accumulation error, over each
// type, bit width, zero-point kind, K with a padded last block and 1, 3 and 8 rows.
TEST(NBitsKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::string source = NBitsKernelSourceForTests();
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  const std::string program =
      "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + KernelHeader(source) +
      "template <int BITS, int BLOCK, int ROWS, int ZP, bool HAS_BIAS, bool WIDE, class T, class Z>\n"
      "void rows_kernel(const T* x, Shape x_shape, int x_ndim, const uint8_t* b, Shape b_shape, const T* "
      "scales,\n"
      "                 const Z* zp, const T* bias, T* y) {\n" +
      KernelBody(source) +
      "\n}\ntemplate <int BITS, int BLOCK, int K, int ZP, int OUT, bool WIDE, class T, class Z, class O>\n"
      "void dequantize_kernel(const uint8_t* b, Shape b_shape, const T* scales, const Z* zp, O* w) {\n" +
      NBitsDequantizeSourceForTests() + "\n}\n#include \"" + (tests / "nbits_kernel_driver.inc").string() +
      "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_nbits_emulation", program, "g++", EmulationFlags()), "");
}

}  // namespace
}  // namespace mlx_ep
