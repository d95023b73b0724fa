#include "runtime/census.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>
#include <utility>

#include <mlx/graph_utils.h>
#include <mlx/primitives.h>

namespace mlx_ep {

std::map<std::string, int> PrimitiveCensus(const std::vector<mx::array>& outputs) {
  std::map<std::string, int> census;
  std::unordered_set<std::uintptr_t> seen_arrays, seen_primitives;
  std::vector<mx::array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!seen_arrays.insert(a.id()).second || !a.has_primitive() || a.is_available()) continue;
    if (seen_primitives.insert(a.primitive_id()).second) ++census[a.primitive().name()];
    for (const mx::array& in : a.inputs()) stack.push_back(in);
  }
  return census;
}

std::string PrintedGraph(const std::vector<mx::array>& outputs) {
  std::ostringstream os;
  mx::print_graph(os, outputs);
  return os.str();
}

std::string FormatCensus(const std::map<std::string, int>& census) {
  std::vector<std::pair<int, std::string>> rows;
  int total = 0;
  for (const auto& [name, n] : census) {
    rows.emplace_back(n, name);
    total += n;
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::string s = "total " + std::to_string(total) + ":";
  for (size_t i = 0; i < rows.size(); ++i)
    s += (i ? ", " : " ") + rows[i].second + " " + std::to_string(rows[i].first);
  return s;
}

}  // namespace mlx_ep
