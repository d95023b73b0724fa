// The device-write kernels (src/runtime/device_writes.cc: one block's and the all-blocks one, whose
// text shares the block copy) run on the host through tests/cpp/cuda_host_emulation.h, against
// loops over the KV blocks' dimensions (tests/cpp/device_writes_driver.inc). On a GPU they run in
// every decode step with device memory on (test_device_memory, test_llm).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "host_program.h"
#include "runtime/device_writes.h"

namespace mlx_ep {
namespace {

// Both kernels as MLX's cuda_kernel wraps them (its parameters, then T), compiled by NVRTC as MLX
// compiles them on the GPU, for each dtype the writes take; the all-blocks kernel for a decode
// step's 44 blocks (22 layers' K and V), with no stack frame: its first form kept the blocks'
// pointers in arrays indexed by blockIdx.y, 1,056 bytes of each thread's stack that every thread
// wrote (a 512-token prompt's writes took 2.2 ms on an H100).
TEST(DeviceWritesKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  constexpr int kBlocks = 44;
  std::string text = MlxKernelsBegin("");
  int count = 0;
  std::map<std::string, int> threads;  // a kernel's block
  for (const char* t : {"__half", "__nv_bfloat16", "float", "int64_t", "uint8_t", "bool"}) {
    const std::string T = t, n = std::to_string(count++);
    std::string one = "one", all = "all";  // not "one" + n: GCC 12's -Wrestrict false positive
    one += n;
    all += n;
    threads[one] = threads[all] = 256;  // device_writes.cc's blocks
    text += "__global__ void one" + n + "(const " + T + "* src, const int32_t* offsets, const " + T +
            "* dst, const int32_t* ok, const int64_t* params, int32_t* done) {\n  using T = " + T + ";\n" +
            DeviceWritesSourceForTests(0) + "}\n";
    std::string args;
    for (const char* kind : {"src", "off", "dst"})
      for (int b = 0; b < kBlocks; ++b)
        args += std::string("const ") + (std::string(kind) == "off" ? "int32_t" : T) + "* " + kind +
                std::to_string(b) + ", ";
    text += "__global__ void " + all + "(" + args +
            "const int32_t* ok, const int64_t* params, int32_t* done) {\n" + "  using T = " + T + ";\n" +
            DeviceWritesSourceForTests(kBlocks) + "}\n";
  }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_device_writes_compile", text, threads), "");
  const std::map<std::string, int> stack = KernelStackBytes("mlx_ep_device_writes_compile");
  EXPECT_EQ(stack.size(), threads.size());
  for (const auto& [kernel, bytes] : stack) EXPECT_EQ(bytes, 0) << kernel;
}

TEST(DeviceWritesKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  const std::string program =
      "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" +
      "template <class T>\nvoid rows_into(const T* src, const int32_t* offsets, const T* dst, const int32_t* "
      "ok,\n"
      "               const int64_t* params, int32_t* done) {\n" +
      DeviceWritesSourceForTests(0) +
      "}\ntemplate <class T>\nvoid all_rows_into_2(const T* src0, const T* src1, const int32_t* off0,\n"
      "                     const int32_t* off1, const T* dst0, const T* dst1, const int32_t* ok,\n"
      "                     const int64_t* params, int32_t* done) {\n" +
      DeviceWritesSourceForTests(2) + "}\n#include \"" + (tests / "device_writes_driver.inc").string() +
      "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_device_writes_emulation", program, "g++", EmulationFlags()), "");
}

// The kernels' params: one kept array per distinct value (device_writes.h, KernelParams), with
// the values given.
TEST(DeviceWritesParams, OneKeptArrayPerValue) {
  const std::vector<int64_t> p = {1, 1, 2048, 1, 64, 2047}, q = {1, 1, 2048, 8, 64, 2040};
  mx::array a = KernelParams(p), again = KernelParams(p), other = KernelParams(q);
  EXPECT_EQ(a.id(), again.id());
  EXPECT_NE(a.id(), other.id());
  ASSERT_EQ(a.dtype(), mx::int64);
  ASSERT_EQ(a.size(), p.size());
  EXPECT_EQ(std::vector<int64_t>(a.data<int64_t>(), a.data<int64_t>() + a.size()), p);
  EXPECT_EQ(std::vector<int64_t>(other.data<int64_t>(), other.data<int64_t>() + other.size()), q);
}

}  // namespace
}  // namespace mlx_ep
