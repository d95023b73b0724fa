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
  // MLX's printout has no strides: a constant's layout (weight_layout.h) decides which kernel a
  // product takes on a GPU, so the evaluated leaves that are not row-contiguous are listed.
  std::unordered_set<std::uintptr_t> seen;
  std::vector<mx::array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(a.id()).second) continue;
    if (a.is_available() || !a.has_primitive()) {
      if (a.is_available() && !a.flags().row_contiguous) {
        os << "Strided leaf (";
        for (size_t d = 0; d < a.ndim(); ++d) os << (d ? "," : "") << a.shape(d);
        os << ") strides (";
        for (size_t d = 0; d < a.ndim(); ++d) os << (d ? "," : "") << a.strides()[d];
        os << ")\n";
      }
      continue;
    }
    for (const mx::array& in : a.inputs()) stack.push_back(in);
  }
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
