// Shape churn: many runs of one session whose input shapes rotate through more signatures than
// the compile cache keeps (ONNXRUNTIME_EP_MLX_MAX_COMPILED), so nearly every run evicts a
// compiled function, traces and compiles again (docs/reliability.md, "Leaks"). It fails when
// RSS grows by more than --max-growth-mib between run --measure-at and the last run, when an
// output is wrong, or when the session's report shows that the runs did not recompile. Leaks
// are LeakSanitizer's business: ctest runs it with LeakSanitizer preloaded (or in the ASan
// build), which fails the process at exit on any unreachable allocation.
//
//   shape_churn MODEL [--runs N] [--measure-at R] [--max-growth-mib M] [--shapes S] [--bound B]
//
// The model (tests/cpp/models/make_models.py, shape_churn.onnx): y1 = Softmax(x W + b) with x
// [a, 16], and y2 = Relu(2 * Gather(E, i)) with a constant table E [16, 16] and i [k]. Both
// outputs' shapes follow the inputs', so the dims cannot be dynamic (docs/dynamic_shapes.md):
// every signature is a trace of its own. The constants MLX fuses into JIT-compiled CPU kernels
// (the table's 16 rows that bound the indices, the 2) do not depend on a or k, and MLX names a
// fused kernel by its ops, dtypes and contiguity, not by its shape: a recompile reuses the
// kernels already built, so the run measures the EP's and MLX's compile path, not g++.
#include <dlfcn.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

namespace {

constexpr const char* kEp = "MLXExecutionProvider";
constexpr int kWidth = 16;

struct Options {
  std::string model;
  long runs = 10000;
  long measure_at = 1000;
  double max_growth_mib = 4;
  int shapes = 24;
  int bound = 4;
};

Options ParseOptions(int argc, char** argv) {
  Options o;
  if (argc < 2) throw std::runtime_error("usage: shape_churn MODEL [--runs N] [--measure-at R] ...");
  o.model = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--runs")
      o.runs = std::stol(value);
    else if (flag == "--measure-at")
      o.measure_at = std::stol(value);
    else if (flag == "--max-growth-mib")
      o.max_growth_mib = std::stod(value);
    else if (flag == "--shapes")
      o.shapes = std::stoi(value);
    else if (flag == "--bound")
      o.bound = std::stoi(value);
    else
      throw std::runtime_error("unknown option " + flag);
  }
  if (o.measure_at < 1 || o.measure_at >= o.runs)
    throw std::runtime_error("--measure-at must be in [1, runs)");
  return o;
}

double RssMib() {
  long pages = 0, resident = 0;
  if (!(std::ifstream("/proc/self/statm") >> pages >> resident) || resident <= 0)
    throw std::runtime_error("cannot read the RSS from /proc/self/statm (Linux only)");
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

const OrtApi& InitOrt() {
  void* handle = dlopen(ORT_RUNTIME_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
  using GetApiBase = const OrtApiBase* (*)();
  auto get_base = reinterpret_cast<GetApiBase>(dlsym(handle, "OrtGetApiBase"));
  const OrtApi* api = get_base ? get_base()->GetApi(ORT_API_VERSION) : nullptr;
  if (!api)
    throw std::runtime_error("the ORT library does not offer API version " + std::to_string(ORT_API_VERSION));
  Ort::InitApi(api);
  return *api;
}

// Signature s: a = 1 + s (x's rows), k = 1 + (5 * s) % 13 (indices): `shapes` distinct pairs.
std::pair<int64_t, int64_t> Signature(int s) { return {1 + s, 1 + (5 * s) % 13}; }

// Checks both outputs: softmax rows sum to 1; y2 = relu(2 * E[i]) with E[r][c] = r - c (the
// model's table).
void CheckOutputs(std::vector<Ort::Value>& outs, int64_t a, const std::vector<int64_t>& idx, long run) {
  auto shape1 = outs[0].GetTensorTypeAndShapeInfo().GetShape();
  auto shape2 = outs[1].GetTensorTypeAndShapeInfo().GetShape();
  const int64_t k = static_cast<int64_t>(idx.size());
  if (shape1 != std::vector<int64_t>{a, kWidth} || shape2 != std::vector<int64_t>{k, kWidth})
    throw std::runtime_error("run " + std::to_string(run) + ": wrong output shapes");
  const float* y1 = outs[0].GetTensorData<float>();
  for (int64_t r = 0; r < a; ++r) {
    double sum = 0;
    for (int c = 0; c < kWidth; ++c) sum += y1[r * kWidth + c];
    if (std::fabs(sum - 1) > 1e-4)
      throw std::runtime_error("run " + std::to_string(run) + ": softmax row sum");
  }
  const float* y2 = outs[1].GetTensorData<float>();
  for (int64_t r = 0; r < k; ++r) {
    const int64_t row = idx[r] < 0 ? idx[r] + kWidth : idx[r];
    for (int c = 0; c < kWidth; ++c)
      if (y2[r * kWidth + c] != std::max(0.f, 2.f * static_cast<float>(row - c)))
        throw std::runtime_error("run " + std::to_string(run) + ": wrong Gather output");
  }
}

// The runs; returns the RSS (MiB) after run `measure_at` and after the last run.
std::pair<double, double> Churn(Ort::Session& session, const Options& o) {
  auto mem = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  const char* in_names[] = {"x", "i"};
  const char* out_names[] = {"y1", "y2"};
  std::vector<float> x;
  std::vector<int64_t> idx;
  double at_measure = 0;
  for (long run = 1; run <= o.runs; ++run) {
    const auto [a, k] = Signature(static_cast<int>(run % o.shapes));
    x.assign(static_cast<size_t>(a * kWidth), 0.f);
    for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>((run + j) % 7) * 0.25f - 0.75f;
    idx.resize(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) idx[j] = (run + 3 * j) % (2 * kWidth) - kWidth;  // [-16, 15]
    const int64_t x_shape[] = {a, kWidth}, i_shape[] = {k};
    std::vector<Ort::Value> inputs;
    inputs.push_back(Ort::Value::CreateTensor<float>(mem, x.data(), x.size(), x_shape, 2));
    inputs.push_back(Ort::Value::CreateTensor<int64_t>(mem, idx.data(), idx.size(), i_shape, 1));
    auto outs = session.Run(Ort::RunOptions{nullptr}, in_names, inputs.data(), 2, out_names, 2);
    CheckOutputs(outs, a, idx, run);
    if (run == o.measure_at) at_measure = RssMib();
    if (run % 1000 == 0 || run == o.measure_at) std::printf("run %6ld: RSS %.1f MiB\n", run, RssMib());
  }
  return {at_measure, RssMib()};
}

// The session's report (ONNXRUNTIME_EP_MLX_REPORT, written when the session is released): the
// runs must have missed the compile cache (and evicted) nearly every time.
int CheckReport(const std::string& path, const Options& o) {
  std::ifstream f(path);
  const auto report = nlohmann::json::parse(f);
  const auto& parts = report.at("runtime").at("partitions");
  if (parts.size() != 1) {
    std::printf("FAIL: expected one MLX partition, got %zu\n", parts.size());
    return 1;
  }
  const auto& p = parts[0];
  const long misses = p.at("cache_misses"), evictions = p.at("evictions"), runs = p.at("runs");
  std::printf("partition: %ld runs, %ld compile-cache misses, %ld evictions, %ld traces\n", runs, misses,
              evictions, static_cast<long>(p.at("traces")));
  // With more signatures than the bound, in rotation, every run misses (LRU); the bound holds
  // per MLX worker, so a run on another worker than its caller's home may hit: allow a few.
  if (runs != o.runs || misses < o.runs * 9 / 10 || evictions < misses - 64L * o.bound) {
    std::printf("FAIL: the runs did not recompile as intended\n");
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  // LeakSanitizer preloaded into this process (ctest) must not follow it into the compilers MLX
  // runs to JIT-build fused CPU kernels: their own leaks would fail the build.
  unsetenv("LD_PRELOAD");
  const std::string report = "shape_churn_report_" + std::to_string(getpid()) + ".json";
  setenv("ONNXRUNTIME_EP_MLX_MAX_COMPILED", std::to_string(o.bound).c_str(), 1);
  setenv("ONNXRUNTIME_EP_MLX_REPORT", report.c_str(), 1);
  InitOrt();
  double first = 0, last = 0;
  {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "shape_churn");
    env.RegisterExecutionProviderLibrary(kEp, MLX_EP_PLUGIN);
    {
      std::vector<Ort::ConstEpDevice> devices;
      for (const auto& d : env.GetEpDevices())
        if (std::string(d.EpName()) == kEp) devices.push_back(d);
      Ort::SessionOptions so;
      so.AppendExecutionProvider_V2(env, devices, std::unordered_map<std::string, std::string>{});
      Ort::Session session(env, o.model.c_str(), so);
      std::tie(first, last) = Churn(session, o);
    }
    env.UnregisterExecutionProviderLibrary(kEp);
  }
  int status = CheckReport(report, o);
  std::remove(report.c_str());
  std::printf("RSS %.1f MiB at run %ld, %.1f MiB at run %ld: %+.2f MiB (bound %.1f MiB)\n", first,
              o.measure_at, last, o.runs, last - first, o.max_growth_mib);
  if (last - first > o.max_growth_mib) {
    std::printf("FAIL: RSS grew beyond the bound\n");
    status = 1;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
