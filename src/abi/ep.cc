#include "abi/ep.h"

#include <cstdint>
#include <fstream>

#include "abi/compute_info.h"
#include "abi/device_memory.h"
#include "abi/factory.h"
#include "abi/graph_reader.h"
#include "abi/status.h"
#include "common/env.h"
#include "common/log.h"
#include "diagnostics/report.h"
#include "partition/partition.h"
#include "runtime/memory.h"
#include "runtime/plan.h"

namespace mlx_ep {
namespace {

// Claims only need small constants (axes, shapes, scalars); weights are copied at Compile.
constexpr size_t kClaimConstantBytes = 1 << 16;

// ONNXRUNTIME_EP_MLX_MAX_COMPILED: a count (0: no bound); anything else keeps the default.
size_t MaxCompiled() {
  const std::string v = EnvString(env::kMaxCompiled);
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9)
    return kDefaultMaxCompiled;
  return static_cast<size_t>(std::stoul(v));
}

// ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS: the smallest bucket (>= 2) a first prompt is padded to; unset,
// 0 or anything else: no padding.
int64_t PromptBuckets() {
  const std::string v = EnvString(env::kPromptBuckets);
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9) return 0;
  const int64_t n = std::stoll(v);
  return n >= 2 ? n : 0;
}

// Why `holder`'s only node cannot take its bodies whole, or "" when it can. A value that must
// fold (a loop condition's carried counter) is unknown from here: ORT has not built the
// holder's graph yet, so neither its producer nor whether it is a constant can be read. It
// counts as runtime data: a body left unclaimed when its holder is declined after all would run
// on CPU, while a body partitioned on its own still runs on MLX.
std::string HolderDeclines(const Graph& holder) {
  const Node& node = holder.nodes.at(0);
  const Claim claim = ClaimNode(node, holder, OpRegistry::Get());
  if (!claim.ok) return claim.reason;
  const std::vector<std::string> inputs = node.AllInputs();
  for (size_t k : claim.fold_inputs) {
    const ValueInfo* v = holder.Value(inputs.at(k));
    if (!inputs[k].empty() && !(v && v->is_constant_initializer))
      return claim.fold_reason + ": it depends on '" + inputs[k] +
             "', which is not a constant (a data-dependent result)";
  }
  return "";
}

// A holder whose body was partitioned on its own (see ClaimGraph) is declined with the reason
// found then, not "its body node MLXExecutionProvider_... has no translation". Keyed by the
// holder's first output (names of nodes may be empty; values are unique).
void ExplainHolders(const Graph& graph, const std::map<std::string, std::string>& reasons,
                    Partitioning& partitioning) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    if (!node.has_subgraphs || node.outputs.empty() || partitioning.decisions[i].claimed) continue;
    auto it = reasons.find(node.outputs[0]);
    if (it != reasons.end())
      partitioning.decisions[i].reason = "its bodies were partitioned on their own first: " + it->second;
  }
}

}  // namespace

MlxEp::MlxEp(MlxEpFactory& factory, const OrtLogger& logger)
    : OrtEp{},
      factory_(factory),
      logger_(logger),
      report_(std::make_unique<SessionReport>()),
      report_path_(EnvString(env::kReportPath)) {
  ort_version_supported = kOrtApiVersion;
  GetName = GetNameImpl;
  GetCapability = GetCapabilityImpl;
  Compile = CompileImpl;
  ReleaseNodeComputeInfos = ReleaseNodeComputeInfosImpl;
  GetDefaultMemoryDevice = GetDefaultMemoryDeviceImpl;
}

MlxEp::~MlxEp() {
  try {
    // ORT's default logger: the session's may be gone while ORT releases the session's EPs.
    const bool verbose = EnvFlag(env::kVerbose);
    if (verbose || OrtWouldLog(LogSeverity::kInfo))
      LogLine("session summary:\n" + report_->Summary(), LogSeverity::kInfo, nullptr, verbose);
    if (!report_path_.empty()) std::ofstream(report_path_) << report_->ToJson() << '\n';
  } catch (...) {
    // Diagnostics must never take the host down while a session closes.
  }
}

const char* ORT_API_CALL MlxEp::GetNameImpl(const OrtEp*) noexcept { return kEpName; }

OrtStatus* ORT_API_CALL MlxEp::GetCapabilityImpl(OrtEp* this_ptr, const OrtGraph* graph,
                                                 OrtEpGraphSupportInfo* graph_support_info) noexcept {
  MLX_EP_API_BEGIN
  static_cast<MlxEp*>(this_ptr)->ClaimGraph(graph, graph_support_info);
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider GetCapability")
}

OrtStatus* ORT_API_CALL MlxEp::CompileImpl(OrtEp* this_ptr, const OrtGraph** graphs,
                                           const OrtNode** fused_nodes, size_t count,
                                           OrtNodeComputeInfo** node_compute_infos,
                                           OrtNode** ep_context_nodes) noexcept {
  MLX_EP_API_BEGIN
  for (size_t i = 0; i < count; ++i) {
    node_compute_infos[i] = nullptr;
    if (ep_context_nodes) ep_context_nodes[i] = nullptr;
  }
  static_cast<MlxEp*>(this_ptr)->CompilePartitions(graphs, fused_nodes, count, node_compute_infos);
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider Compile")
}

// The EP's memory on a GPU device (ORT places MLX partitions' tensors there and copies at the
// boundaries with other EPs); null on the CPU device: host memory.
OrtStatus* ORT_API_CALL MlxEp::GetDefaultMemoryDeviceImpl(const OrtEp*,
                                                          const OrtMemoryDevice** device) noexcept {
  MLX_EP_API_BEGIN
  *device = DeviceMemoryEnabled() ? Ort::GetEpApi().MemoryInfo_GetMemoryDevice(GetDeviceMemoryInfos().device)
                                  : nullptr;
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider GetDefaultMemoryDevice")
}

void ORT_API_CALL MlxEp::ReleaseNodeComputeInfosImpl(OrtEp*, OrtNodeComputeInfo** infos,
                                                     size_t num_infos) noexcept {
  for (size_t i = 0; i < num_infos; ++i) delete static_cast<MlxNodeComputeInfo*>(infos[i]);
}

void MlxEp::ClaimGraph(const OrtGraph* ort_graph, OrtEpGraphSupportInfo* support_info) {
  // ORT partitions bodies of If/Loop/Scan before the graph holding them. When the node holding
  // this body will be claimed whole (its bodies traced inline), claim nothing here: fusing body
  // nodes now would hide them from that claim.
  if (Ort::ConstNode parent = Ort::ConstGraph{ort_graph}.GetParentNode(); parent != nullptr) {
    const Graph holder = ReadNodeAlone(parent, kClaimConstantBytes);
    const std::string reason = HolderDeclines(holder);
    if (reason.empty()) return;
    holder_reasons_[holder.nodes.at(0).outputs.at(0)] = reason;
  }
  Graph graph = ReadGraph(ort_graph, kClaimConstantBytes);
  Partitioning partitioning = PartitionGraph(graph, OpRegistry::Get());
  ExplainHolders(graph, holder_reasons_, partitioning);
  LogClaims(graph, partitioning, &logger_);
  report_->AddGraph(graph, partitioning, kEpName);

  std::vector<Ort::ConstNode> ort_nodes = Ort::ConstGraph{ort_graph}.GetNodes();
  OrtNodeFusionOptions options{};
  options.ort_version_supported = kOrtApiVersion;
  options.drop_constant_initializers = true;  // Compile keeps its own copies
  for (const auto& cluster : partitioning.clusters) {
    std::vector<const OrtNode*> nodes;
    for (size_t i : cluster) nodes.push_back(ort_nodes.at(i));
    Ort::ThrowOnError(Ort::GetEpApi().EpGraphSupportInfo_AddNodesToFuse(support_info, nodes.data(),
                                                                        nodes.size(), &options));
  }
}

void MlxEp::CompilePartitions(const OrtGraph** graphs, const OrtNode** fused_nodes, size_t count,
                              OrtNodeComputeInfo** node_compute_infos) {
  const bool compile = !EnvFlag(env::kNoCompile);
  const size_t max_compiled = MaxCompiled();
  const int64_t prompt_buckets = PromptBuckets();
  std::vector<std::unique_ptr<MlxNodeComputeInfo>> infos;
  for (size_t i = 0; i < count; ++i) {
    Ort::ConstNode fused{fused_nodes[i]};
    const std::string name = fused.GetName();
    std::vector<std::string> inputs, outputs;
    for (const auto& vi : fused.GetInputs()) inputs.push_back(vi == nullptr ? "" : vi.GetName());
    for (const auto& vi : fused.GetOutputs()) outputs.push_back(vi == nullptr ? "" : vi.GetName());
    Graph graph = ReadGraph(graphs[i], SIZE_MAX);
    Plan plan;
    try {
      plan = BuildPlan(graph, name, inputs, outputs, OpRegistry::Get());
    } catch (const std::exception& e) {
      // The model's graph at fault (a value without a type, a body of the wrong arity): as
      // ORT's own graph checks; anything else is the EP's failure to handle what it claimed.
      const bool graph = dynamic_cast<const std::invalid_argument*>(&e) != nullptr;
      throw EpError(graph ? ErrorKind::kInvalidGraph : ErrorKind::kEpFail,
                    "partition " + name + ": " + e.what());
    }
    auto runner = std::make_shared<PartitionRunner>(std::move(plan), compile, max_compiled);
    runner->set_logger(&logger_);
    runner->set_prompt_buckets(prompt_buckets);
    report_->AddRunner(runner);
    infos.push_back(std::make_unique<MlxNodeComputeInfo>(runner));
  }
  for (size_t i = 0; i < count; ++i) node_compute_infos[i] = infos[i].release();
}

}  // namespace mlx_ep
