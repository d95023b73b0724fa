// Builds and runs a host program at test time: the kernel tests (nbits_kernel_test.cc,
// device_writes_kernel_test.cc, gqa_decode_kernel_test.cc) compile the EP's CUDA kernel sources
// with NVRTC as MLX does on a GPU, and run them on the host through cuda_host_emulation.h.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include <unistd.h>

namespace mlx_ep {

/** A kernel's text as the EP hands it to its tests (`...SourceForTests()`): the header, then the
 *  marker "// kernel body:" and the body that MLX wraps in its generated kernel. */
inline std::string KernelHeader(const std::string& source) {
  return source.substr(0, source.find("// kernel body:"));
}
inline std::string KernelBody(const std::string& source) {
  return source.substr(source.find("// kernel body:"));
}

/** The scratch folders this process made, removed when it exits (a test run left ~25 behind in
 *  the temporary directory per kernel test before). */
class ScratchDirs {
 public:
  ~ScratchDirs() {
    std::error_code ignored;
    for (const auto& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }
  void Add(const std::filesystem::path& dir) { dirs_.insert(dir); }

 private:
  std::set<std::filesystem::path> dirs_;
};

/** A folder of the temporary directory for `name`'s files, one per process: two builds' tests
 *  running at once (a clean clone's beside the checkout's) must not overwrite each other's. It
 *  stays until the process exits (PtxasReport reads a compile's log after BuildAndRun). */
inline std::filesystem::path ScratchDir(const std::string& name) {
  static ScratchDirs made;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (name + "." + std::to_string(static_cast<long>(getpid())));
  std::filesystem::create_directories(dir);
  made.Add(dir);
  return dir;
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/** Compiles `program` with `compiler` and `flags` (and `libs` after the source) in ScratchDir(name)
 *  and, unless `run_it` is false (an object file only), runs it: ""
 *  when that succeeds, else the logs. */
inline std::string BuildAndRun(const std::string& name, const std::string& program,
                               const std::string& compiler, const std::string& flags, bool run_it = true,
                               const std::string& libs = "") {
  const std::filesystem::path dir = ScratchDir(name);
  std::ofstream(dir / "program.cc") << program;
  const std::string build = compiler + " " + flags + " -o " + (dir / "program").string() + " " +
                            (dir / "program.cc").string() + " " + libs + " > " +
                            (dir / "build.txt").string() + " 2>&1";
  if (std::system(build.c_str()) != 0) return "build failed:\n" + ReadFile(dir / "build.txt");
  if (!run_it) return "";
  const std::string run = (dir / "program").string() + " > " + (dir / "run.txt").string() + " 2>&1";
  const int rc = std::system(run.c_str());
  const std::string output = ReadFile(dir / "run.txt");
  std::printf("%s", output.c_str());
  return rc == 0 ? "" : "run failed:\n" + output;
}

/** What a compile test (CompileLikeMlx) puts before its kernels, as MLX's cuda_kernel orders a kernel's
 *  text: the CUDA headers, the kernel's own `header`, then mlx::core::cu with a stand-in for
 *  MLX's Shape. The kernels follow; close with kMlxKernelsEnd. */
inline std::string MlxKernelsBegin(const std::string& header) {
  return "#include <cuda/std/cstdint>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + header +
         "namespace mlx::core::cu {\nstruct Shape { int32_t v[8]; __device__ int32_t operator[](int i) const "
         "{ return v[i]; } };\n";
}
inline constexpr const char* kMlxKernelsEnd = "}  // namespace mlx::core::cu\n";

/** True when CUDA's runtime compiler is here (nvrtc.h and libnvrtc), for CompileLikeMlx. */
inline bool NvrtcAvailable() {
  return std::filesystem::exists("/usr/local/cuda/include/nvrtc.h") &&
         std::filesystem::exists("/usr/local/cuda/lib64/libnvrtc.so");
}

/** The registers a block may hold on the GPUs MLX's CUDA backend targets (sm_70 and later): a
 *  launch of more threads times registers fails. */
inline constexpr int kRegistersPerBlock = 65536;

/** After a compile of ScratchDir(name)'s kernels: for each kernel, by its name in mlx::core::cu
 *  ("k3" for `__global__ void k3(...)`), the number `report` (a regex: the mangled name's tail,
 *  then the number, as groups 1 and 2) captures in ptxas's report in its run.txt. */
inline std::map<std::string, int> PtxasReport(const std::string& name, const char* report) {
  std::map<std::string, int> values;
  const std::string log = ReadFile(ScratchDir(name) / "run.txt");
  const std::regex entry(report);
  for (std::sregex_iterator it(log.begin(), log.end(), entry), end; it != end; ++it)
    values[(*it)[1].str()] = std::stoi((*it)[2].str());
  return values;
}

/** Each kernel's registers a thread (PtxasReport). */
inline std::map<std::string, int> KernelRegisters(const std::string& name) {
  return PtxasReport(
      name, R"(Compiling entry function '_ZN3mlx4core2cu\d+(\w+?)E[^']*'[\s\S]*?Used (\d+) registers)");
}

/** Each kernel's stack frame in bytes (PtxasReport, "N bytes stack frame"): arrays a kernel
 *  indexes at run time live there, in memory each thread writes and reads. */
inline std::map<std::string, int> KernelStackBytes(const std::string& name) {
  return PtxasReport(
      name, R"(Function properties for _ZN3mlx4core2cu\d+(\w+?)E\S*\s+ptxas\s+\.\s+(\d+) bytes stack frame)");
}

/** `kernels` (MlxKernelsBegin ... kMlxKernelsEnd) compiled as MLX's CUDA backend compiles a
 *  custom kernel on the GPU (mlx/backend/cuda/jit_module.cpp: NVRTC, no host headers,
 *  --device-as-default-execution-space, CUDA's and CCCL's headers, the SASS of the H100/H200's
 *  sm_90a, as MLX compiles where NVRTC can), and every block checked against the registers it may
 *  hold: "" when it compiles and each kernel of `threads` (its name -> its block's threads) was
 *  reported by ptxas and fits kRegistersPerBlock, else NVRTC's log or what does not fit. A host
 *  program of its own links libnvrtc. */
inline std::string CompileLikeMlx(const std::string& name, const std::string& kernels,
                                  const std::map<std::string, int>& threads) {
  const std::filesystem::path dir = ScratchDir(name);
  std::ofstream(dir / "kernels.cu") << kernels;
  const std::string driver = R"(#include <nvrtc.h>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
int main() {
  std::ifstream in(")" + (dir / "kernels.cu").string() +
                             R"(");
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  nvrtcProgram program;
  if (nvrtcCreateProgram(&program, source.c_str(), "kernels.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return 2;
  const char* options[] = {"--device-as-default-execution-space", "--gpu-architecture=sm_90a",
                           "--include-path=/usr/local/cuda/include", "--include-path=/usr/local/cuda/include/cccl",
                           "--ptxas-options=-v"};
  const nvrtcResult result = nvrtcCompileProgram(program, 5, options);
  size_t size = 0;
  nvrtcGetProgramLogSize(program, &size);
  std::string log(size, '\0');
  nvrtcGetProgramLog(program, log.data());
  nvrtcDestroyProgram(&program);
  std::printf("%s\n", log.c_str());  // the errors, or ptxas's report (KernelRegisters)
  return result == NVRTC_SUCCESS ? 0 : 1;
}
)";
  const std::string built =
      BuildAndRun(name, driver, "g++", "-std=c++17 -I/usr/local/cuda/include", /*run_it=*/true,
                  "-L/usr/local/cuda/lib64 -lnvrtc -Wl,-rpath,/usr/local/cuda/lib64");
  if (!built.empty()) return built;
  const std::map<std::string, int> registers = KernelRegisters(name);
  std::string problems;
  if (registers.size() != threads.size())
    problems += std::to_string(registers.size()) + " kernels reported, " + std::to_string(threads.size()) +
                " compiled\n";
  for (const auto& [kernel, block] : threads) {
    const auto it = registers.find(kernel);
    if (it == registers.end())
      problems += kernel + ": no report\n";
    else if (block * it->second > kRegistersPerBlock)
      problems += kernel + ": " + std::to_string(block) + " threads x " + std::to_string(it->second) +
                  " registers > " + std::to_string(kRegistersPerBlock) + "\n";
  }
  return problems;
}

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
