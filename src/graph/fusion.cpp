// The fusion pass and the generator of fused kernels (see fusion.h).
#include "graph/fusion.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "graph/fusible.h"
#include "ops/kernel_cache.h"
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

// Contiguous row-major strides.
bool contiguous(const Operand& o) {
  int64_t step = 1;
  for (size_t d = o.shape.size(); d-- > 0;) {
    if (o.shape[d] != 1 && o.strides[d] != step) return false;
    step *= o.shape[d];
  }
  return true;
}

}  // namespace

bool is_gemm_producer(const Graph& g, const Node& n) {
  // kernels/gemm.tile's `gemm` in f32 with only its epilogue flags set; beta = 0, so C is only
  // written (its operands: A, B, C, bias; scalars: alpha, beta).
  if (n.elementwise || n.kernel != "gemm" || n.operands.size() != 4 || n.scalars.size() != 2 ||
      n.scalars[1] != 0.0)
    return false;
  for (const auto& [name, value] : n.params)
    if (name != "BIAS" && name != "ACT" && !(name == "T" && value == "f32")) return false;
  for (const Operand& o : n.operands)
    if (g.values[size_t(o.value)].dtype != DType::kF32) return false;
  return n.operands[2].shape.size() == 2 && contiguous(n.operands[2]);
}

namespace {

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
      // A gemm's output C read whole, in its own order, by b alone: b becomes its epilogue.
      const int gemm = users[size_t(o.value)].empty() ? -1 : users[size_t(o.value)][0];
      if (gemm >= 0 && gemm < b && v.temporary && is_gemm_producer(g, g.nodes[size_t(gemm)])) {
        const Operand& c = g.nodes[size_t(gemm)].operands[2];
        bool whole = c.value == o.value && c.offset == o.offset && contiguous(o) &&
                     shape_numel(o.shape) == shape_numel(c.shape) &&
                     users[size_t(o.value)] == std::vector<int>{gemm, b} &&
                     nb.output().value != o.value;
        for (const Operand& other : nb.operands)  // the epilogue reads [M, N] views of them
          whole = whole && other.shape == o.shape && contiguous(other);
        if (whole) {
          edges.emplace_back(b, k, gemm);
          parent[size_t(find_root(parent, gemm))] = find_root(parent, b);
        }
        continue;
      }
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
    for (int i : nodes)
      if (!g.nodes[size_t(i)].elementwise) group.producer = i;
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
    bool safe = true;
    for (int i : nodes) {
      const Node& node = g.nodes[size_t(i)];
      if (i == group.producer) {  // its A, B and bias are read when the group runs
        for (int k : {0, 1, 3})
          read_values.insert(node.operands[size_t(k)].value);
        continue;
      }
      // In a gemm's epilogue every operand is read as an [M, N] view of the same layout.
      if (group.producer >= 0)
        for (const Operand& o : node.operands)
          safe = safe && contiguous(o) &&
                 shape_numel(o.shape) ==
                     shape_numel(g.nodes[size_t(group.producer)].operands[2].shape);
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
    group.source =
        group.producer >= 0 ? generate_gemm_epilogue(g, group) : generate_kernel(g, group);
    if (group.source.empty()) continue;
    for (int i : nodes)
      plan.group_of[size_t(i)] = int(plan.groups.size());
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

namespace {

// The element-wise part of a group: a load per outside input (`load(i)` gives the text that
// reads input i), each node's expression as a local, in step order; the producer's value (a
// gemm's epilogue) is the local `producer_local`. Returns the statements and the last local.
std::pair<std::string, std::string> group_body(const Graph& g, const FusedGroup& group,
                                               const std::function<std::string(size_t)>& load,
                                               const std::string& producer_local,
                                               const std::string& indent) {
  std::vector<Operand> input_operands;
  for (size_t i = 0; i < group.inputs.size(); ++i)
    input_operands.push_back(
        g.nodes[size_t(group.inputs[i].first)].operands[size_t(group.inputs[i].second)]);
  std::map<std::pair<int, int>, int> producer_of;  // (consumer, operand) -> producer node
  for (const auto& [b, k, a] : group.edges)
    producer_of[{b, k}] = a;

  std::string body;
  for (size_t i = 0; i < group.inputs.size(); ++i)
    body += fmt::format("{}x{} = {}\n", indent, i, load(i));
  std::map<int, std::string> local;  // node -> its local
  if (group.producer >= 0) local[group.producer] = producer_local;
  size_t scalar = 0;
  for (int node : group.nodes) {
    if (node == group.producer) continue;
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
    body += fmt::format("{}{} = {}\n", indent, local[node],
                        *elementwise_expression(nd.kernel, nd.params, in, scalars));
  }
  return {body, local.at(group.nodes.back())};
}

}  // namespace

std::string generate_kernel(const Graph& g, const FusedGroup& group) {
  auto [statements, last] = group_body(
      g, group, [](size_t i) { return fmt::format("f32(X{}[z, r, c])", i); }, "", "      ");
  std::string body = statements + fmt::format("      Y[z, r, c] = {}\n", last);
  const size_t scalar = group.scalars.size();

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

std::string generate_gemm_epilogue(const Graph& g, const FusedGroup& group) {
  // kernels/gemm.tile's first kernel, whose last statement stores the epilogue's value into C.
  auto file = ops::embedded_kernel_files().find("gemm.tile");
  if (file == ops::embedded_kernel_files().end()) return "";
  const std::string& text = file->second;
  const size_t begin = text.find("kernel gemm<"), end = text.find("\n}\n", begin);
  const std::string store = "      C[r, c] = ", params_end = "bias: U[N], alpha: f32,";
  if (begin == std::string::npos || end == std::string::npos) return "";
  std::string kernel = text.substr(begin, end + 3 - begin);
  const size_t at = kernel.find(store), params_at = kernel.find(params_end);
  const size_t beta_at = kernel.find("beta: f32)");
  if (at == std::string::npos || params_at == std::string::npos || beta_at == std::string::npos)
    return "";
  // The store becomes the local the chain starts from, the chain follows, then O is written.
  auto [statements, last] = group_body(
      g, group, [](size_t i) { return fmt::format("f32(E{}[r, c])", i); }, "epilogue", "      ");
  const size_t line_end = kernel.find('\n', at);
  kernel.replace(
      at, line_end - at,
      "      epilogue = " + kernel.substr(at + store.size(), line_end - at - store.size()) + "\n" +
          statements + "      O[r, c] = " + last);
  std::string scalars;
  for (size_t i = 0; i < group.scalars.size(); ++i)
    scalars += fmt::format(", s{}: f32", i);
  kernel.insert(kernel.find("beta: f32)") + std::string("beta: f32").size(), scalars);
  std::string extra;
  for (size_t i = 0; i < group.inputs.size(); ++i)
    extra += fmt::format("E{}: U[M, N], ", i);
  extra += "O: U[M, N], ";
  kernel.insert(params_at + std::string("bias: U[N], ").size(), extra);
  // The gemm's own specialisation (BIAS, ACT) becomes the defaults: launch_source passes none.
  for (const auto& [name, value] : g.nodes[size_t(group.producer)].params) {
    const size_t p = kernel.find(name + " = 0,");
    if (name == "T") continue;
    if (p == std::string::npos) return "";
    kernel.replace(p, name.size() + 5, name + " = " + value + ",");
  }
  const std::string hash = hash_hex(hash_text(kernel)).substr(0, 12);
  kernel.replace(0, std::string("kernel gemm<").size(), "kernel fused_gemm_" + hash + "<");
  return fmt::format(
      "# Generated by graph/fusion.cpp: kernels/gemm.tile with {} element-wise "
      "launches as its epilogue.\n{}",
      group.nodes.size() - 1, kernel);
}

}  // namespace tessel::graph
