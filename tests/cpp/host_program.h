// Builds and runs a host program at test time (the kernel emulation tests: nbits_kernel_test.cc,
// device_writes_kernel_test.cc, with cuda_host_emulation.h).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace mlx_ep {

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/** Compiles `program` with `compiler` and `flags` in a folder `name` of the temporary directory
 *  and, unless `run_it` is false (an object file only), runs it: "" when that succeeds, else the
 *  logs. */
inline std::string BuildAndRun(const std::string& name, const std::string& program,
                               const std::string& compiler, const std::string& flags, bool run_it = true) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "program.cc") << program;
  const std::string build = compiler + " " + flags + " -o " + (dir / "program").string() + " " +
                            (dir / "program.cc").string() + " > " + (dir / "build.txt").string() + " 2>&1";
  if (std::system(build.c_str()) != 0) return "build failed:\n" + ReadFile(dir / "build.txt");
  if (!run_it) return "";
  const std::string run = (dir / "program").string() + " > " + (dir / "run.txt").string() + " 2>&1";
  const int rc = std::system(run.c_str());
  const std::string output = ReadFile(dir / "run.txt");
  std::printf("%s", output.c_str());
  return rc == 0 ? "" : "run failed:\n" + output;
}

/** nvcc's path, or "" when the CUDA toolkit is absent. */
inline std::string FindNvcc() {
  for (const char* candidate : {"/usr/local/cuda/bin/nvcc", "/usr/bin/nvcc"})
    if (std::filesystem::exists(candidate)) return candidate;
  return "";
}

/** What an nvcc compile test puts before its kernels, as MLX's cuda_kernel orders a kernel's
 *  text: the CUDA headers, the kernel's own `header`, then mlx::core::cu with a stand-in for
 *  MLX's Shape. The kernels follow; close with kMlxKernelsEnd. */
inline std::string MlxKernelsBegin(const std::string& header) {
  return "#include <cstdint>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + header +
         "namespace mlx::core::cu {\nstruct Shape { int32_t v[8]; __device__ int32_t operator[](int i) const "
         "{ return v[i]; } };\n";
}
inline constexpr const char* kMlxKernelsEnd = "}  // namespace mlx::core::cu\n";

/** nvcc's flags for those tests: CUDA source whatever the file's name, an object file only. */
inline constexpr const char* kNvccCompileFlags = "-x cu -std=c++17 -arch=sm_90 -c";

/** CUDA's headers (cuda_fp16.h for the half types on the host), or "" when absent. */
inline std::string CudaIncludeDir() {
  const std::filesystem::path dir = "/usr/local/cuda/include";
  return std::filesystem::exists(dir / "cuda_fp16.h") ? dir.string() : "";
}

/** The flags the emulation programs build with: no contraction into fused multiply-adds, which
 *  the kernels' rounding intrinsics forbid on the device. */
inline std::string EmulationFlags() {
  return "-std=c++20 -O1 -ffp-contract=off -pthread -I" + CudaIncludeDir();
}

}  // namespace mlx_ep
