#include "diagnostics/report.h"

#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/log.h"
#include "runtime/device_writes.h"
#include "runtime/memory.h"

namespace mlx_ep {

void SessionReport::AddGraph(const Graph& graph, const Partitioning& p, const std::string& fused_domain) {
  GraphEntry e;
  e.name = graph.name;
  e.nodes_total = graph.nodes.size();
  for (const auto& cluster : p.clusters) {
    e.clusters.emplace_back();
    for (size_t i : cluster) e.clusters.back().emplace_back(graph.nodes[i].Label(), graph.nodes[i].op_type);
    e.nodes_claimed += cluster.size();
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.domain == fused_domain) {
      ++e.earlier_partitions;  // already ours: not a declined node
      continue;
    }
    if (!p.decisions[i].claimed)
      e.declined.push_back({n.Label(), n.op_type, n.domain, p.decisions[i].reason});
  }
  for (const Boundary& b : p.boundaries)
    e.boundaries.push_back(
        {b.value, graph.nodes[b.producer].Label(), graph.nodes[b.consumer].Label(), b.reason, b.from, b.to});
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& g : graphs_)
    if (g.name == e.name) {
      e.passes = g.passes + 1;
      e.declined_earlier = std::move(g.declined_earlier);
      e.declined_earlier.insert(e.declined_earlier.end(), g.declined.begin(), g.declined.end());
      g = std::move(e);
      return;
    }
  graphs_.push_back(std::move(e));
}

void SessionReport::AddRunner(std::shared_ptr<const PartitionRunner> runner) {
  std::lock_guard<std::mutex> lock(mu_);
  runners_.push_back(std::move(runner));
}

std::string SessionReport::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json j;
  j["graphs"] = nlohmann::json::array();
  for (const auto& g : graphs_) {
    nlohmann::json jg{{"graph", g.name}, {"nodes_total", g.nodes_total}, {"nodes_claimed", g.nodes_claimed}};
    jg["partitions"] = nlohmann::json::array();
    for (const auto& c : g.clusters) {
      nlohmann::json nodes = nlohmann::json::array();
      for (const auto& [name, op] : c) nodes.push_back({{"name", name}, {"op_type", op}});
      jg["partitions"].push_back({{"nodes", nodes}});
    }
    jg["declined"] = nlohmann::json::array();
    for (const auto& d : g.declined)
      jg["declined"].push_back(
          {{"node", d.node}, {"op_type", d.op_type}, {"domain", d.domain}, {"reason", d.reason}});
    if (g.passes > 1) {
      jg["capability_passes"] = g.passes;
      jg["partitions_from_earlier_passes"] = g.earlier_partitions;
      jg["declined_in_earlier_passes"] = nlohmann::json::array();
      for (const auto& d : g.declined_earlier)
        jg["declined_in_earlier_passes"].push_back(
            {{"node", d.node}, {"op_type", d.op_type}, {"domain", d.domain}, {"reason", d.reason}});
    }
    jg["boundaries"] = nlohmann::json::array();
    for (const auto& b : g.boundaries)
      jg["boundaries"].push_back({{"value", b.value},
                                  {"producer", b.producer},
                                  {"consumer", b.consumer},
                                  {"from_partition", b.from},
                                  {"to_partition", b.to},
                                  {"reason", b.reason}});
    j["graphs"].push_back(jg);
  }
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& r : runners_) {
    RunnerStats s = r->stats();
    std::vector<std::string> ops;
    for (const auto& pn : r->plan().nodes) ops.push_back(pn.node.op_type);
    parts.push_back({{"name", r->plan().name},
                     {"nodes", r->plan().nodes.size()},
                     {"op_types", ops},
                     {"runs", s.runs},
                     {"cache_hits", s.cache_hits},
                     {"cache_misses", s.cache_misses},
                     {"traces", s.traces},
                     {"trace_ms", static_cast<double>(s.trace_us) / 1000.0},
                     {"folded_nodes", s.folded_nodes},
                     {"scalar_input_traces", s.scalar_input_traces},
                     {"constant_primitives_folded", s.constant_primitives_folded},
                     {"evictions", s.evictions},
                     {"bytes_in_host_copied", s.bytes_in_host_copied},
                     {"bytes_in_wrapped", s.bytes_in_wrapped},
                     {"bytes_out_host_copied", s.bytes_out_host_copied},
                     {"bytes_out_adopted", s.bytes_out_adopted},
                     {"bytes_out_device_copied", s.bytes_out_device_copied},
                     {"bytes_out_in_place", s.bytes_out_in_place},
                     {"bucketed_runs", s.bucketed_runs},
                     {"bucket_refusals", s.bucket_refusals},
                     {"bucket_refusal", s.bucket_refusal},
                     {"steady_runs", s.steady_runs},
                     {"bind_ms", static_cast<double>(s.bind_us) / 1000.0},
                     {"graph_ms", static_cast<double>(s.graph_us) / 1000.0},
                     {"eval_ms", static_cast<double>(s.eval_us) / 1000.0},
                     {"write_ms", static_cast<double>(s.write_us) / 1000.0},
                     {"wait_ms", static_cast<double>(s.wait_us) / 1000.0}});
  }
  const TransferStats t = GetTransferStats();  // process-wide: every session's boundary copies
  j["runtime"] = {{"partitions", parts},
                  {"device_memory", DeviceMemoryEnabled()},
                  {"device_writes", DeviceWritesEnabled()},
                  {"transfer_bytes",
                   {{"host_to_device", t.host_to_device},
                    {"device_to_host", t.device_to_host},
                    {"device_to_device", t.device_to_device}}},
                  {"prefetched_bytes", t.prefetched_to_gpu}};
  return j.dump(2);
}

std::string SessionReport::Summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  for (const auto& g : graphs_) {
    os << "claimed " << g.nodes_claimed << "/" << g.nodes_total << " nodes in " << g.clusters.size()
       << " partition(s)";
    if (g.passes > 1)
      os << " in pass " << g.passes << ", after " << g.earlier_partitions
         << " partition(s) of earlier passes, which declined " << g.declined_earlier.size() << " node(s)";
    os << "\n";
  }
  for (const auto& r : runners_) {
    RunnerStats s = r->stats();
    os << "partition " << r->plan().name << ": " << r->plan().nodes.size() << " nodes, " << s.runs
       << " runs, compile cache " << s.cache_hits << " hits / " << s.cache_misses << " misses, " << s.traces
       << " traces (" << s.trace_us / 1000 << " ms), " << s.folded_nodes << " nodes folded, "
       << s.constant_primitives_folded << " constant primitives; bytes in " << s.bytes_in_host_copied
       << " copied / " << s.bytes_in_wrapped << " wrapped, out " << s.bytes_out_host_copied << " copied / "
       << s.bytes_out_adopted << " adopted / " << s.bytes_out_device_copied << " device-copied / "
       << s.bytes_out_in_place << " in place";
    if (s.bucketed_runs || s.bucket_refusals)
      os << "; prompt buckets: " << s.bucketed_runs << " runs padded, " << s.bucket_refusals << " refused";
    if (s.steady_runs)
      os << "; per run without a trace " << s.bind_us / s.steady_runs << " us bind / "
         << s.graph_us / s.steady_runs << " us graph / " << s.eval_us / s.steady_runs << " us eval / "
         << s.write_us / s.steady_runs << " us write (" << s.wait_us / s.steady_runs
         << " us of it waiting for the device)";
    os << "\n";
  }
  return os.str();
}

void LogClaims(const Graph& graph, const Partitioning& p, const OrtLogger* logger) {
  size_t claimed = 0;
  for (const auto& d : p.decisions) claimed += d.claimed;
  const bool verbose = EnvFlag(env::kVerbose);
  if (verbose || OrtWouldLog(LogSeverity::kInfo, logger))
    LogLine("GetCapability: claimed " + std::to_string(claimed) + "/" + std::to_string(graph.nodes.size()) +
                " nodes in " + std::to_string(p.clusters.size()) + " partition(s)",
            LogSeverity::kInfo, logger, verbose);
  const bool debug = EnvFlag(env::kClaimDebug);
  if (!debug && !OrtWouldLog(LogSeverity::kVerbose, logger)) return;
  auto log = [&](const std::string& line) { LogLine(line, LogSeverity::kVerbose, logger, debug); };
  std::map<std::string, size_t> unclaimed_ops;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (p.decisions[i].claimed) continue;
    const Node& n = graph.nodes[i];
    ++unclaimed_ops[n.QualifiedOp()];
    log("declined " + n.Label() + " (" + n.QualifiedOp() + "): " + p.decisions[i].reason);
  }
  auto side = [](int c) { return c < 0 ? std::string("CPU") : "partition " + std::to_string(c); };
  for (const Boundary& b : p.boundaries)
    log("boundary '" + b.value + "' " + side(b.from) + " -> " + side(b.to) + ": " + b.reason);
  if (!unclaimed_ops.empty()) {
    std::string line = "unclaimed op types:";
    for (const auto& [op, count] : unclaimed_ops) line += " " + op + "(x" + std::to_string(count) + ")";
    log(line);
  }
}

}  // namespace mlx_ep
