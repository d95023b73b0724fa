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
// compiles them on the GPU, for each dtype the writes take.
TEST(DeviceWritesKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
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
    text += "__global__ void all" + n + "(const " + T + "* src0, const " + T + "* src1, const " + T +
            "* src2, const int32_t* off0, const int32_t* off1, const int32_t* off2, const " + T +
            "* dst0, const " + T + "* dst1, const " + T +
            "* dst2, const int32_t* ok, const int64_t* params, int32_t* done) {\n" + "  using T = " + T +
            ";\n" + DeviceWritesSourceForTests(3) + "}\n";
  }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_device_writes_compile", text, threads), "");
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
