#include "blas/blas.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "common/log.h"
#include "ops/op.h"
#include "runtime/mlx_thread.h"

#if defined(__linux__)
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sched.h>
#endif

#if defined(MLX_EP_HAVE_BLAS_SHIM)
extern "C" {  // libonnxruntime_ep_mlx_blas (src/blas/blas_shim.c)
void onnxruntime_ep_mlx_blas_set_num_threads(int num_threads);
void onnxruntime_ep_mlx_blas_configure_threads(int num_threads, int fit_to_load);
int onnxruntime_ep_mlx_blas_threads_for_load(double load);
int onnxruntime_ep_mlx_blas_num_threads(void);
unsigned long onnxruntime_ep_mlx_blas_pool_batches(void);
const char* onnxruntime_ep_mlx_blas_corename(void);
const char* onnxruntime_ep_mlx_blas_target(void);
// The shim's forwarder to OpenBLAS (CBLAS enums are ints: row major 101, no transpose 111, transpose 112).
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc);
}
#endif

namespace mlx_ep {
namespace {

#if defined(__linux__) && defined(__LP64__)

/** A loaded ELF object: its load bias and its dynamic section. */
struct LoadedObject {
  const void* probe = nullptr;  // an address inside the object we look for
  ElfW(Addr) base = 0;
  const ElfW(Dyn) * dynamic = nullptr;
};

int FindObjectHolding(struct dl_phdr_info* info, size_t, void* data) {
  auto* obj = static_cast<LoadedObject*>(data);
  const auto probe = reinterpret_cast<ElfW(Addr)>(obj->probe);
  bool holds = false;
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const ElfW(Addr) start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && probe >= start && probe < start + ph.p_memsz) holds = true;
    if (ph.p_type == PT_DYNAMIC) dynamic = reinterpret_cast<const ElfW(Dyn)*>(start);
  }
  if (!holds || !dynamic) return 0;
  obj->base = info->dlpi_addr;
  obj->dynamic = dynamic;
  return 1;
}

/** glibc relocates the addresses in a writable .dynamic in place (x86-64, aarch64); other
 *  loaders leave them as link-time offsets. Accept both. */
ElfW(Addr) DynamicAddress(const LoadedObject& obj, ElfW(Addr) value) {
  return value < obj.base ? value + obj.base : value;
}

/** The GOT slot through which `obj` calls `symbol` (its JUMP_SLOT or GLOB_DAT relocation). */
void* const* GotSlot(const LoadedObject& obj, const char* symbol) {
  const ElfW(Sym)* symbols = nullptr;
  const char* strings = nullptr;
  ElfW(Addr) plt_relocs = 0, relocs = 0;
  size_t plt_relocs_size = 0, relocs_size = 0;
  bool plt_is_rela = true;
  for (const ElfW(Dyn)* d = obj.dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        symbols = reinterpret_cast<const ElfW(Sym)*>(DynamicAddress(obj, d->d_un.d_ptr));
        break;
      case DT_STRTAB:
        strings = reinterpret_cast<const char*>(DynamicAddress(obj, d->d_un.d_ptr));
        break;
      case DT_JMPREL:
        plt_relocs = DynamicAddress(obj, d->d_un.d_ptr);
        break;
      case DT_PLTRELSZ:
        plt_relocs_size = d->d_un.d_val;
        break;
      case DT_PLTREL:
        plt_is_rela = d->d_un.d_val == DT_RELA;
        break;
      case DT_RELA:
        relocs = DynamicAddress(obj, d->d_un.d_ptr);
        break;
      case DT_RELASZ:
        relocs_size = d->d_un.d_val;
        break;
      default:
        break;
    }
  }
  if (!symbols || !strings || !plt_is_rela) return nullptr;
  auto scan = [&](ElfW(Addr) table, size_t size) -> void* const* {
    const auto* r = reinterpret_cast<const ElfW(Rela)*>(table);
    for (size_t i = 0; table && i < size / sizeof(ElfW(Rela)); ++i) {
      const auto sym = ELF64_R_SYM(r[i].r_info);
      if (sym != 0 && std::strcmp(strings + symbols[sym].st_name, symbol) == 0)
        return reinterpret_cast<void* const*>(obj.base + r[i].r_offset);
    }
    return nullptr;
  };
  void* const* slot = scan(plt_relocs, plt_relocs_size);
  return slot ? slot : scan(relocs, relocs_size);
}

/** Runs one float32 matmul on MLX's CPU stream, which makes the dynamic linker resolve a lazily
 *  bound cblas_sgemm. */
void ResolveSgemm() {
  RunOnMlxThread([] {
    const mx::array a = mx::ones({2, 2}, mx::float32, mx::Device::cpu);
    mx::eval(mx::matmul(a, a, mx::Device::cpu));
  });
}

std::string Remedy(const BlasBinding& b) {
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  Dl_info shim{};
  dladdr(reinterpret_cast<void*>(&onnxruntime_ep_mlx_blas_set_num_threads), &shim);
  return "libmlx.so was loaded before the EP library (e.g. by `import mlx.core`), so it is not bound "
         "to the EP's OpenBLAS shim. Register the EP library before anything loads MLX, or start the "
         "process with LD_PRELOAD=" +
         std::string(shim.dli_fname ? shim.dli_fname : "libonnxruntime_ep_mlx_blas.so");
#else
  (void)b;
  return "the EP was built without scipy-openblas32. Install scipy-openblas32 (version in "
         "scripts/versions.env) and rebuild; `make build` does both";
#endif
}

BlasBinding Inspect() {
  BlasBinding b;
  LoadedObject mlx;
  mlx.probe = reinterpret_cast<const void*>(&mx::version);
  if (!dl_iterate_phdr(FindObjectHolding, &mlx)) {
    b.kind = "unknown";
    b.note = "libmlx.so was not found among the loaded objects";
    return b;
  }
  void* const* slot = GotSlot(mlx, "cblas_sgemm");
  if (!slot) {
    b.kind = "unknown";
    b.note = "libmlx.so does not import cblas_sgemm through its GOT";
    return b;
  }
  Dl_info target{};
  if (dladdr(*slot, &target) && reinterpret_cast<ElfW(Addr)>(target.dli_fbase) == mlx.base) {
    ResolveSgemm();  // lazy binding: the slot still points at libmlx's own PLT
    target = Dl_info{};
  }
  if (!dladdr(*slot, &target) || !target.dli_fname) {
    b.kind = "unknown";
    b.note = "libmlx.so's cblas_sgemm points at no loaded object";
    return b;
  }
  b.sgemm_library = target.dli_fname;
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  Dl_info shim{};
  if (dladdr(reinterpret_cast<void*>(&onnxruntime_ep_mlx_blas_set_num_threads), &shim) &&
      shim.dli_fbase == target.dli_fbase) {
    b.kind = "openblas";
    b.backend = onnxruntime_ep_mlx_blas_target();
    b.corename = onnxruntime_ep_mlx_blas_corename();
    b.threads = onnxruntime_ep_mlx_blas_num_threads();
    return b;
  }
#endif
  b.kind = b.sgemm_library.find("mlx_cpu.libs/") != std::string::npos ? "bundled" : "other";
  if (b.kind == "bundled") b.note = Remedy(b);
  return b;
}

#else  // not ELF/Linux: MLX links its platform BLAS (Accelerate on macOS)

BlasBinding Inspect() {
  BlasBinding b;
  b.kind = "unknown";
  b.note = "not inspected on this platform (MLX links the platform's BLAS)";
  return b;
}

#endif

int BlasThreadsFromEnv() {
  const std::string value = EnvString(env::kBlasThreads);
  if (value.empty()) return DefaultBlasThreads();
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || n < 1 || n > 1024) {
    LogLine(std::string(env::kBlasThreads) + "=" + value + " is not a thread count (1 or more); using " +
                std::to_string(DefaultBlasThreads()),
            LogSeverity::kWarning);
    return DefaultBlasThreads();
  }
  return static_cast<int>(n);
}

}  // namespace

int DefaultBlasThreads() {
#if defined(__linux__)
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return std::max(1, CPU_COUNT(&cpus));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

void ConfigureBlasThreads() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int threads = BlasThreadsFromEnv();
#if defined(MLX_EP_HAVE_BLAS_SHIM)
    // The default policy follows the machine's load (blas_shim.c); a count the user set is kept.
    onnxruntime_ep_mlx_blas_configure_threads(threads, EnvString(env::kBlasThreads).empty() ? 1 : 0);
#else
    (void)threads;
#endif
  });
}

int BlasThreadsForLoad(double load) {
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  return onnxruntime_ep_mlx_blas_threads_for_load(load);
#else
  (void)load;
  return -1;
#endif
}

bool ConfigureBlasThreadsForTest(int threads, bool fit_to_load) {
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  onnxruntime_ep_mlx_blas_configure_threads(threads, fit_to_load ? 1 : 0);
  return true;
#else
  (void)threads;
  (void)fit_to_load;
  return false;
#endif
}

BlasBinding InspectBlasBinding() { return Inspect(); }

bool SetBlasThreads(int threads) {
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  onnxruntime_ep_mlx_blas_set_num_threads(threads);
  return true;
#else
  (void)threads;
  return false;
#endif
}

bool HaveSgemm() {
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  return true;
#else
  return false;
#endif
}

namespace {

/** Row-major cblas_sgemm with A as stored and B as stored (111) or transposed (112), through the
 *  shim; false without it. */
bool RowMajorSgemm(int trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                   float beta, float* c, int ldc) {
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  ConfigureBlasThreads();
  cblas_sgemm(101, 111, trans_b, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
  return true;
#else
  (void)trans_b, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c,
      (void)ldc;
  return false;
#endif
}

}  // namespace

bool SgemmRowsByColumns(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                        int ldc) {
  return RowMajorSgemm(112, m, n, k, a, lda, b, ldb, 0.f, c, ldc);
}

bool SgemmRowMajor(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta,
                   float* c, int ldc) {
  return RowMajorSgemm(111, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

int64_t BlasPoolBatches() {
#if defined(MLX_EP_HAVE_BLAS_SHIM)
  return static_cast<int64_t>(onnxruntime_ep_mlx_blas_pool_batches());
#else
  return -1;
#endif
}

std::string DescribeBlasBinding(const BlasBinding& b) {
  std::ostringstream os;
  os << "BLAS: ";
  if (b.kind == "openblas") {
    os << "libmlx.so's cblas_sgemm -> " << b.sgemm_library << " -> OpenBLAS " << b.backend << " ("
       << b.corename << " kernels, " << b.threads << " thread" << (b.threads == 1 ? "" : "s") << "; "
       << env::kBlasThreads << " sets it)";
  } else if (b.kind == "bundled") {
    os << "libmlx.so's cblas_sgemm -> " << b.sgemm_library
       << ", the single-threaded reference BLAS bundled with the MLX wheel (MatMul is ~15x slower "
          "than with OpenBLAS): "
       << b.note;
  } else if (b.kind == "other") {
    os << "libmlx.so's cblas_sgemm -> " << b.sgemm_library;
  } else {
    os << "unknown (" << b.note << ")";
  }
  return os.str();
}

}  // namespace mlx_ep
