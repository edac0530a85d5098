// The fusion pass and the generator of fused kernels (see fusion.h).
#include "graph/fusion.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "graph/fusible.h"
#include "support/hash.h"

namespace tessel::graph {
namespace {

bool fusible(const Graph& g, const Node& n) {
  if (!n.elementwise) return false;
  for (const Operand& o : n.operands)
    if (g.values[size_t(o.value)].dtype != DType::kF32) return false;
  std::vector<std::string> in(size_t(n.num_inputs()), "x"), scalars(n.scalars.size(), "s");
  return elementwise_expression(n.kernel, n.params, in, scalars).has_value();
}

int find_root(std::vector<int>& parent, int i) {
  while (parent[size_t(i)] != i)
    i = parent[size_t(i)] = parent[size_t(parent[size_t(i)])];
  return i;
}

}  // namespace

FusionPlan plan_fusion(const Graph& g) {
  const int n = int(g.nodes.size());
  // Which nodes touch each value.
  std::vector<std::vector<int>> users(g.values.size());
  for (int i = 0; i < n; ++i)
    for (const Operand& o : g.nodes[size_t(i)].operands)
      if (users[size_t(o.value)].empty() || users[size_t(o.value)].back() != i)
        users[size_t(o.value)].push_back(i);

  // Edges a -> b where a's output is an intermediate only b reads.
  std::vector<int> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<std::tuple<int, int, int>> edges;
  for (int b = 0; b < n; ++b) {
    const Node& nb = g.nodes[size_t(b)];
    if (!fusible(g, nb)) continue;
    for (int k = 0; k < nb.num_inputs(); ++k) {
      const Operand& o = nb.operands[size_t(k)];
      const Value& v = g.values[size_t(o.value)];
      const int a = v.producer;
      if (a < 0 || a >= b || !v.temporary || !fusible(g, g.nodes[size_t(a)])) continue;
      if (users[size_t(o.value)] != std::vector<int>{a, b}) continue;
      if (!(g.nodes[size_t(a)].output() == o) || nb.output().value == o.value) continue;
      edges.emplace_back(b, k, a);
      parent[size_t(find_root(parent, a))] = find_root(parent, b);
    }
  }

  std::map<int, std::vector<int>> members;
  for (int i = 0; i < n; ++i)
    members[find_root(parent, i)].push_back(i);

  FusionPlan plan;
  plan.group_of.assign(size_t(n), -1);
  for (auto& [root, nodes] : members) {
    if (nodes.size() < 2) continue;
    FusedGroup group;
    group.nodes = nodes;  // ascending: step order
    std::set<int> in_group(nodes.begin(), nodes.end());
    for (const auto& e : edges)
      if (in_group.count(std::get<0>(e))) group.edges.push_back(e);
    // Outside operands: every operand that is not an edge's, and not the last node's output.
    std::set<std::pair<int, int>> internal;
    for (const auto& [b, k, a] : group.edges) {
      internal.insert({b, k});
      internal.insert({a, int(g.nodes[size_t(a)].operands.size()) - 1});
    }
    std::vector<Operand> seen;
    std::set<int> read_values;
    for (int i : nodes) {
      const Node& node = g.nodes[size_t(i)];
      for (int k = 0; k < node.num_inputs(); ++k) {
        if (internal.count({i, k})) continue;
        const Operand& o = node.operands[size_t(k)];
        read_values.insert(o.value);
        if (std::find(seen.begin(), seen.end(), o) != seen.end()) continue;
        seen.push_back(o);
        group.inputs.emplace_back(i, k);
      }
      for (int s = 0; s < int(node.scalars.size()); ++s)
        group.scalars.emplace_back(i, s);
    }
    // The output may be written where an input lies (add_into) only through the same view.
    const Operand& out = g.nodes[size_t(nodes.back())].output();
    bool safe = true;
    for (const Operand& o : seen)
      if (o.value == out.value && !(o == out)) safe = false;
    // Nothing between the first and last node may write what the group reads.
    for (int i = nodes.front() + 1; safe && i < nodes.back(); ++i) {
      if (in_group.count(i)) continue;
      const Node& other = g.nodes[size_t(i)];
      for (size_t k = 0; k < other.operands.size(); ++k) {
        const bool writes = !other.elementwise || k + 1 == other.operands.size();
        if (writes && read_values.count(other.operands[k].value)) safe = false;
      }
    }
    if (!safe) continue;
    group.source = generate_kernel(g, group);
    for (int i : nodes)
      plan.group_of[size_t(i)] = int(plan.groups.size());
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

std::string generate_kernel(const Graph& g, const FusedGroup& group) {
  std::map<std::pair<int, int>, std::string> input_name;  // (node, operand) -> local
  std::vector<Operand> input_operands;
  for (size_t i = 0; i < group.inputs.size(); ++i)
    input_operands.push_back(
        g.nodes[size_t(group.inputs[i].first)].operands[size_t(group.inputs[i].second)]);
  std::map<std::pair<int, int>, int> producer_of;  // (consumer, operand) -> producer node
  for (const auto& [b, k, a] : group.edges)
    producer_of[{b, k}] = a;

  std::string body;
  for (size_t i = 0; i < group.inputs.size(); ++i)
    body += fmt::format("      x{} = f32(X{}[z, r, c])\n", i, i);
  std::map<int, std::string> local;  // node -> its local
  size_t scalar = 0;
  for (int node : group.nodes) {
    const Node& nd = g.nodes[size_t(node)];
    std::vector<std::string> in, scalars;
    for (int k = 0; k < nd.num_inputs(); ++k) {
      if (auto p = producer_of.find({node, k}); p != producer_of.end()) {
        in.push_back(local.at(p->second));
        continue;
      }
      const Operand& o = nd.operands[size_t(k)];
      const size_t which = size_t(std::find(input_operands.begin(), input_operands.end(), o) -
                                  input_operands.begin());
      in.push_back(fmt::format("x{}", which));
    }
    for (size_t s = 0; s < nd.scalars.size(); ++s)
      scalars.push_back(fmt::format("s{}", scalar++));
    local[node] = fmt::format("t{}", node);
    body += fmt::format("      {} = {}\n", local[node],
                        *elementwise_expression(nd.kernel, nd.params, in, scalars));
  }
  body += fmt::format("      Y[z, r, c] = {}\n", local.at(group.nodes.back()));

  std::string params;
  for (size_t i = 0; i < group.inputs.size(); ++i)
    params += fmt::format("X{}: f32[D0, D1, D2], ", i);
  params += "Y: f32[D0, D1, D2]";
  for (size_t s = 0; s < scalar; ++s)
    params += fmt::format(", s{}: f32", s);
  const std::string text = fmt::format(
      "<BM = 4, BN = 256>({}) {{\n"
      "  grid (cdiv(D2, BN), cdiv(D1, BM), D0) as (bx, by, z) {{\n"
      "    parallel (i, j) in [BM, BN] {{\n"
      "      r = by * BM + i\n"
      "      c = bx * BN + j\n"
      "{}"
      "    }}\n"
      "  }}\n"
      "}}\n",
      params, body);
  // Named by its text, so two different groups never share an entry point or a cache entry.
  return fmt::format(
      "# Generated by graph/fusion.cpp from {} element-wise launches.\n"
      "kernel fused_{}{}",
      group.nodes.size(), hash_hex(hash_text(text)).substr(0, 12), text);
}

}  // namespace tessel::graph
