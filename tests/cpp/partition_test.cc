// Claim and partition: convex clusters, host-input cuts, declines with reasons.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "partition/partition.h"

namespace mlx_ep {
namespace {

using testing::GraphBuilder;

std::vector<mx::array> PassThrough(const OpContext& c) { return {c.input(0)}; }

// A registry of fake ops: "Yes" is claimed, "No" is declined, "NeedsHost" reads input 1 on the host.
const OpRegistry& FakeRegistry() {
  static const OpRegistry r = [] {
    OpRegistry reg;
    reg.Add({"", "Yes", 1, 100, [](const NodeView&) { return Claim::Yes(); }, PassThrough});
    reg.Add({"", "No", 1, 100, [](const NodeView&) { return Claim::No("fake decline"); }, PassThrough});
    reg.Add({"", "NeedsHost", 1, 100, [](const NodeView&) { return Claim::Yes({1}); }, PassThrough});
    reg.Add({"", "ShapeOf", 1, 100, [](const NodeView&) { return Claim::Yes(); }, PassThrough,
             HostEval::kFromShapes});
    reg.Add({"", "Fold", 1, 100, [](const NodeView&) { return Claim::Yes(); }, PassThrough,
             HostEval::kFromValues});
    reg.Add({"", "Throws", 1, 100, [](const NodeView&) -> Claim { throw std::runtime_error("boom"); },
             PassThrough});
    return reg;
  }();
  return r;
}

TEST(Partition, ChainOfClaimedNodesIsOneCluster) {
  Graph g =
      GraphBuilder().Input("x").AddNode("Yes", {"x"}, {"a"}).AddNode("Yes", {"a"}, {"b"}).Output("b").Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  ASSERT_EQ(p.clusters.size(), 1u);
  EXPECT_EQ(p.clusters[0], (std::vector<size_t>{0, 1}));
}

TEST(Partition, DeclinedNodeSplitsAndGivesReason) {
  Graph g = GraphBuilder()
                .Input("x")
                .AddNode("Yes", {"x"}, {"a"})
                .AddNode("No", {"a"}, {"b"})
                .AddNode("Yes", {"b"}, {"c"})
                .Output("c")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  EXPECT_EQ(p.clusters.size(), 2u);
  EXPECT_FALSE(p.decisions[1].claimed);
  EXPECT_EQ(p.decisions[1].reason, "fake decline");
}

// x -> A(yes) -> B(no) -> C(yes), and A -> C directly: A and C in one cluster would make the
// path A -> B -> C leave and re-enter it, which ORT cannot fuse.
TEST(Partition, ClustersStayConvex) {
  Graph g = GraphBuilder()
                .Input("x")
                .AddNode("Yes", {"x"}, {"a"})
                .AddNode("No", {"a"}, {"b"})
                .AddNode("Yes", {"a", "b"}, {"c"})
                .Output("c")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  ASSERT_EQ(p.clusters.size(), 2u);
  EXPECT_EQ(p.clusters[0], (std::vector<size_t>{0}));
  EXPECT_EQ(p.clusters[1], (std::vector<size_t>{2}));
}

TEST(Partition, HostInputProducerStaysOutsideCluster) {
  Graph g = GraphBuilder()
                .Input("x")
                .AddNode("Yes", {"x"}, {"shape"})
                .AddNode("NeedsHost", {"x", "shape"}, {"y"})
                .Output("y")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  EXPECT_EQ(p.clusters.size(), 2u);
}

// Shape arithmetic (Shape -> folded ops -> a host input) is known while tracing: the whole chain
// and its consumer stay in one cluster.
TEST(Partition, FoldableShapeChainStaysInCluster) {
  Graph g = GraphBuilder()
                .Input("x")
                .AddNode("Yes", {"x"}, {"a"})
                .AddNode("ShapeOf", {"a"}, {"s"})
                .AddNode("Fold", {"s"}, {"t"})
                .AddNode("NeedsHost", {"a", "t"}, {"y"})
                .Output("y")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  ASSERT_EQ(p.clusters.size(), 1u);
  EXPECT_EQ(p.clusters[0].size(), 4u);
}

// A folding op fed by runtime data (a graph input) does not fold: its consumer's host input is
// read from ORT's tensor, across a partition boundary.
TEST(Partition, FoldOfRuntimeDataIsCut) {
  Graph g = GraphBuilder()
                .Input("x")
                .Input("shape", ElemType::kInt64)
                .AddNode("Fold", {"shape"}, {"t"}, ElemType::kInt64)
                .AddNode("NeedsHost", {"x", "t"}, {"y"})
                .Output("y")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  EXPECT_EQ(p.clusters.size(), 2u);
}

// Independent claimed chains (here two branches that both start at a graph input) share a
// cluster: every partition boundary costs a host round trip.
TEST(Partition, IndependentChainsShareACluster) {
  Graph g = GraphBuilder()
                .Input("x")
                .Input("z")
                .AddNode("Yes", {"x"}, {"a"})
                .AddNode("Yes", {"z"}, {"b"})
                .AddNode("Yes", {"a", "b"}, {"c"})
                .Output("c")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  EXPECT_EQ(p.clusters.size(), 1u);
}

// Every value crossing sides is listed once per consumer, with the reason.
TEST(Partition, EveryBoundaryIsExplained) {
  Graph g = GraphBuilder()
                .Input("x")
                .AddNode("Yes", {"x"}, {"a"})
                .AddNode("No", {"a"}, {"b"})
                .AddNode("Yes", {"b"}, {"shape"})
                .AddNode("NeedsHost", {"b", "shape"}, {"y"})
                .Output("y")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  ASSERT_EQ(p.clusters.size(), 3u);
  ASSERT_EQ(p.boundaries.size(), 4u);
  EXPECT_EQ(p.boundaries[0].value, "a");  // MLX -> CPU
  EXPECT_EQ(p.boundaries[0].to, -1);
  EXPECT_NE(p.boundaries[0].reason.find("consumer No_1 (No) runs on CPU: fake decline"), std::string::npos);
  EXPECT_EQ(p.boundaries[1].value, "b");  // CPU -> MLX
  EXPECT_EQ(p.boundaries[1].from, -1);
  EXPECT_NE(p.boundaries[1].reason.find("producer No_1 (No) runs on CPU"), std::string::npos);
  EXPECT_EQ(p.boundaries[3].value, "shape");  // a host input from runtime data
  EXPECT_NE(
      p.boundaries[3].reason.find("reads it on the host (input 1) and it depends on runtime tensor data"),
      std::string::npos)
      << p.boundaries[3].reason;
}

TEST(Partition, UnknownOpAndThrowingClaimAreDeclined) {
  Graph g = GraphBuilder()
                .Input("x")
                .AddNode("Mystery", {"x"}, {"a"})
                .AddNode("Throws", {"a"}, {"b"})
                .Output("b")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  EXPECT_TRUE(p.clusters.empty());
  EXPECT_NE(p.decisions[0].reason.find("no MLX translation for ai.onnx::Mystery"), std::string::npos);
  EXPECT_NE(p.decisions[1].reason.find("boom"), std::string::npos);
}

TEST(Partition, StringTensorsAreDeclined) {
  Graph g = GraphBuilder()
                .Input("s", ElemType::kString)
                .AddNode("Yes", {"s"}, {"t"}, ElemType::kString)
                .Output("t")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  EXPECT_FALSE(p.decisions[0].claimed);
  EXPECT_NE(p.decisions[0].reason.find("string"), std::string::npos);
}

TEST(Partition, TopologicalOrderHandlesUnsortedNodes) {
  GraphBuilder b;
  b.Input("x").AddNode("Yes", {"a"}, {"b"}).AddNode("Yes", {"x"}, {"a"}).Output("b");
  Graph g = b.Build();
  EXPECT_EQ(TopologicalOrder(g), (std::vector<size_t>{1, 0}));
}

TEST(Registry, OverlappingRangesAreRejected) {
  OpRegistry r;
  r.Add({"", "Op", 1, 10, nullptr, nullptr});
  EXPECT_THROW(r.Add({"", "Op", 10, 12, nullptr, nullptr}), std::logic_error);
  r.Add({"", "Op", 11, 12, nullptr, nullptr});
  EXPECT_EQ(r.Find("ai.onnx", "Op", 11)->since, 11);
  EXPECT_EQ(r.Find("", "Op", 13), nullptr);
}

}  // namespace
}  // namespace mlx_ep

namespace mlx_ep {
namespace {

// x -> A1 -> N1(no) -> B2 ; x -> B1 -> N2(no) -> A2 ; A2 also reads A1, B2 also reads B1.
// Each cluster {A1, A2} / {B1, B2} alone is convex, but together they would depend on each other
// (A1 -> N1 -> B2 and B1 -> N2 -> A2): the partitioner must not create that cycle.
TEST(Partition, ClustersNeverDependOnEachOther) {
  Graph g = testing::GraphBuilder()
                .Input("x")
                .AddNode("Yes", {"x"}, {"a1"})
                .AddNode("Yes", {"x"}, {"b1"})
                .AddNode("No", {"a1"}, {"n1"})
                .AddNode("No", {"b1"}, {"n2"})
                .AddNode("Yes", {"a1", "n2"}, {"a2"})
                .AddNode("Yes", {"b1", "n1"}, {"b2"})
                .Output("a2")
                .Output("b2")
                .Build();
  Partitioning p = PartitionGraph(g, FakeRegistry());
  std::vector<int> cluster_of(g.nodes.size(), -1);
  for (size_t c = 0; c < p.clusters.size(); ++c)
    for (size_t v : p.clusters[c]) cluster_of[v] = static_cast<int>(c);
  // a1 and a2 may share a cluster, or b1 and b2, but not both pairs.
  EXPECT_FALSE(cluster_of[0] == cluster_of[4] && cluster_of[1] == cluster_of[5]);
}

}  // namespace
}  // namespace mlx_ep

namespace mlx_ep {
namespace {

// A fake control-flow op: claimed when its body is (the claim sees SubgraphFacts); it reads on
// the host whatever its body reads there (roots mapped to implicit-input indices).
Claim ClaimHolder(const NodeView& v) {
  const SubgraphFacts* f = v.subgraph("body");
  if (!f) return Claim::No("no facts");
  std::vector<size_t> host;
  for (const auto& root : f->host_roots)
    for (size_t j = 0; j < v.node().implicit_inputs.size(); ++j)
      if (v.node().implicit_inputs[j] == root) host.push_back(v.node().inputs.size() + j);
  return Claim::Yes(host);
}

const OpRegistry& HolderRegistry() {
  static const OpRegistry r = [] {
    OpRegistry reg;
    reg.Add({"", "Yes", 1, 100, [](const NodeView&) { return Claim::Yes(); }, PassThrough});
    reg.Add({"", "No", 1, 100, [](const NodeView&) { return Claim::No("fake decline"); }, PassThrough});
    reg.Add({"", "NeedsHost", 1, 100, [](const NodeView&) { return Claim::Yes({1}); }, PassThrough});
    reg.Add({"", "Fold", 1, 100, [](const NodeView&) { return Claim::Yes(); }, PassThrough,
             HostEval::kFromValues});
    reg.Add({"", "Holder", 1, 100, ClaimHolder, PassThrough});
    return reg;
  }();
  return r;
}

// A node holding `body` (attribute "body") that reads outer-scope `implicit` values.
Graph WithHolder(GraphBuilder b, Graph body, std::vector<std::string> implicit, const std::string& in,
                 const std::string& out) {
  Graph g = b.AddNode("Holder", {in}, {out}).Output(out).Build();
  Node& holder = g.nodes.back();
  holder.has_subgraphs = true;
  holder.implicit_inputs = std::move(implicit);
  holder.subgraphs["body"] = std::make_shared<Graph>(std::move(body));
  return g;
}

TEST(Partition, NodeWithADeclinedBodyNodeIsDeclinedWithItsReason) {
  Graph body = GraphBuilder()
                   .Outer("outer")
                   .AddNode("Yes", {"outer"}, {"t"})
                   .AddNode("No", {"t"}, {"r"})
                   .Output("r")
                   .Build();
  Graph g = WithHolder(GraphBuilder().Input("x").AddNode("Yes", {"x"}, {"outer"}), std::move(body), {"outer"},
                       "x", "y");
  Partitioning p = PartitionGraph(g, HolderRegistry());
  EXPECT_FALSE(p.decisions[1].claimed);
  EXPECT_NE(p.decisions[1].reason.find("subgraph 'body'"), std::string::npos) << p.decisions[1].reason;
  EXPECT_NE(p.decisions[1].reason.find("fake decline"), std::string::npos) << p.decisions[1].reason;
}

// x -> a -> No -> outer; the holder reads a explicitly and outer only through its body (an
// implicit input). In a's cluster it would make the path a -> No -> outer -> holder leave that
// cluster and come back: convexity (and the topological order) must count implicit inputs.
TEST(Partition, ImplicitInputsCountForConvexityAndOrder) {
  Graph body = GraphBuilder().Outer("outer").AddNode("Yes", {"outer"}, {"r"}).Output("r").Build();
  Graph g = WithHolder(GraphBuilder()
                           .Input("x")
                           .AddNode("Yes", {"x"}, {"a"})
                           .AddNode("No", {"a"}, {"n"})
                           .AddNode("Yes", {"n"}, {"outer"}),
                       std::move(body), {"outer"}, "a", "y");
  std::swap(g.nodes[0], g.nodes[3]);  // holder first: only the implicit edge orders it last
  g.IndexProducers();
  EXPECT_EQ(TopologicalOrder(g).back(), 0u);
  Partitioning p = PartitionGraph(g, HolderRegistry());
  ASSERT_TRUE(p.decisions[0].claimed) << p.decisions[0].reason;
  std::vector<int> cluster_of(g.nodes.size(), -1);
  for (size_t c = 0; c < p.clusters.size(); ++c)
    for (size_t v : p.clusters[c]) cluster_of[v] = static_cast<int>(c);
  EXPECT_NE(cluster_of[0], cluster_of[3]);  // holder apart from a's producer
  EXPECT_EQ(cluster_of[0], cluster_of[2]);  // with outer's producer
}

// A body node reading an outer value on the host makes that implicit input a host input of the
// holder: computed from runtime data, it is cut into an earlier partition; folded, it stays.
TEST(Partition, BodyHostInputsBecomeHostInputsOfTheHolder) {
  auto body = [] {
    return GraphBuilder()
        .Input("b")
        .Outer("outer")
        .AddNode("NeedsHost", {"b", "outer"}, {"r"})
        .Output("r")
        .Build();
  };
  Graph runtime =
      WithHolder(GraphBuilder().Input("x").AddNode("Yes", {"x"}, {"outer"}), body(), {"outer"}, "x", "y");
  EXPECT_EQ(PartitionGraph(runtime, HolderRegistry()).clusters.size(), 2u);
  Tensor two{ElemType::kInt64, {}, std::vector<uint8_t>(8, 0)};
  Graph folded = WithHolder(GraphBuilder().Input("x").Constant("k", two).AddNode("Fold", {"k"}, {"outer"}),
                            body(), {"outer"}, "x", "y");
  EXPECT_EQ(PartitionGraph(folded, HolderRegistry()).clusters.size(), 1u);
}

}  // namespace
}  // namespace mlx_ep
