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

const std::vector<EpilogueProducer>& epilogue_producers() {
  static const std::vector<EpilogueProducer> table = {
      // C = act(alpha A B + beta C + bias): only written when beta = 0 (scalars alpha, beta).
      {"gemm",
       "gemm.tile",
       2,
       "      C[r, c] = ",
       "[r, c]",
       "U[M, N]",
       {"BIAS", "ACT", "BM", "BN", "BK"},  // blocks: ops/gemm_precision.h cpu_gemm_blocks
       [](const Node& n) { return n.scalars.size() == 2 && n.scalars[1] == 0.0; }},
      // C[z] = alpha A[z] B[z] + beta C[z]: matmul's products and gradients (beta = 0 only).
      {"batched_gemm",
       "batched_gemm.tile",
       2,
       "      C[z, r, c] = ",
       "[z, r, c]",
       "f32[Z, M, N]",
       {"BM", "BN", "BK"},
       [](const Node& n) { return n.scalars.size() == 2 && n.scalars[1] == 0.0; }},
      // Y = X scale + offset per channel, over [N, C, L].
      {"batchnorm_apply",
       "batchnorm.tile",
       4,
       "      Y[n, c, l] = ",
       "[n, c, l]",
       "T[N, C, L]",
       {},
       [](const Node&) { return true; }},
  };
  return table;
}

const EpilogueProducer* epilogue_producer(const Graph& g, const Node& n) {
  if (n.elementwise) return nullptr;
  for (const EpilogueProducer& p : epilogue_producers()) {
    if (n.kernel != p.kernel || !p.accepts(n) || p.output >= int(n.operands.size())) continue;
    for (const auto& [name, value] : n.params)
      if (!(name == "T" && value == "f32") &&
          std::find(p.params.begin(), p.params.end(), name) == p.params.end())
        return nullptr;
    for (const Operand& o : n.operands)
      if (g.values[size_t(o.value)].dtype != DType::kF32) return nullptr;
    return contiguous(n.operands[size_t(p.output)]) ? &p : nullptr;
  }
  return nullptr;
}

namespace {

int find_root(std::vector<int>& parent, int i) {
  while (parent[size_t(i)] != i)
    i = parent[size_t(i)] = parent[size_t(parent[size_t(i)])];
  return i;
}

}  // namespace

namespace {

FusionPlan plan_groups(const Graph& g, const std::set<int>& no_producers);

}  // namespace

FusionPlan plan_fusion(const Graph& g, const std::set<int>& no_producers) {
  // A producer whose group has an expensive expression is planned again without it.
  std::set<int> excluded = no_producers;
  for (;;) {
    FusionPlan plan = plan_groups(g, excluded);
    bool again = false;
    for (const FusedGroup& group : plan.groups) {
      if (group.producer < 0) continue;
      for (int node : group.nodes) {
        const Node& n = g.nodes[size_t(node)];
        if (node != group.producer && !is_cheap_elementwise(n.kernel, n.params)) {
          excluded.insert(group.producer);
          again = true;
          break;
        }
      }
    }
    if (!again) return plan;
  }
}

namespace {

FusionPlan plan_groups(const Graph& g, const std::set<int>& no_producers) {
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
      // A producer's output read whole, in its own order, by b alone: b becomes its epilogue.
      const int gemm = users[size_t(o.value)].empty() ? -1 : users[size_t(o.value)][0];
      const EpilogueProducer* producer = gemm >= 0 && gemm < b && !no_producers.count(gemm)
                                             ? epilogue_producer(g, g.nodes[size_t(gemm)])
                                             : nullptr;
      if (producer && v.temporary) {
        const Operand& c = g.nodes[size_t(gemm)].operands[size_t(producer->output)];
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
      if (i == group.producer) {  // its inputs are read when the group runs
        const int written = epilogue_producer(g, node)->output;
        for (int k = 0; k < int(node.operands.size()); ++k)
          if (k != written) read_values.insert(node.operands[size_t(k)].value);
        continue;
      }
      // In an epilogue every operand is read as a view of the producer output's layout.
      if (group.producer >= 0) {
        const Node& p = g.nodes[size_t(group.producer)];
        const Operand& written = p.operands[size_t(epilogue_producer(g, p)->output)];
        for (const Operand& o : node.operands)
          safe = safe && contiguous(o) && shape_numel(o.shape) == shape_numel(written.shape);
      }
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
      for (size_t k = 0; k < other.operands.size(); ++k)
        if (other.writes[k] && read_values.count(other.operands[k].value)) safe = false;
    }
    if (!safe) continue;
    group.source = group.producer >= 0 ? generate_epilogue(g, group) : generate_kernel(g, group);
    if (group.source.empty()) continue;
    for (int i : nodes)
      plan.group_of[size_t(i)] = int(plan.groups.size());
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

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
    // Named by position, so groups of the same structure share one kernel (and one compile).
    local[node] = fmt::format("t{}", local.size());
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

std::string generate_epilogue(const Graph& g, const FusedGroup& group) {
  const Node& producer = g.nodes[size_t(group.producer)];
  const EpilogueProducer* p = epilogue_producer(g, producer);
  if (!p) return "";
  // The producer's kernel in its .tile file, whose last statement stores one output element.
  auto file = ops::embedded_kernel_files().find(p->file);
  if (file == ops::embedded_kernel_files().end()) return "";
  const std::string& text = file->second;
  const std::string head = "kernel " + p->kernel + "<";
  const size_t begin = text.find(head), end = text.find("\n}\n", begin);
  if (begin == std::string::npos || end == std::string::npos) return "";
  std::string kernel = text.substr(begin, end + 3 - begin);
  const size_t at = kernel.find(p->store);
  // The parameter list's end: parameters hold brackets, never parentheses.
  const size_t params_end = kernel.find(')', kernel.find(">("));
  if (at == std::string::npos || params_end == std::string::npos) return "";
  // The store becomes the local the chain starts from, the chain follows, then O is written.
  const std::string index = p->index;
  auto [statements, last] = group_body(
      g, group, [&](size_t i) { return fmt::format("f32(E{}{})", i, index); }, "epilogue",
      "      ");
  const size_t line_end = kernel.find('\n', at);
  const std::string value = kernel.substr(at + p->store.size(), line_end - at - p->store.size());
  kernel.replace(
      at, line_end - at,
      "      epilogue = " + value + "\n" + statements + "      O" + index + " = " + last);
  // New parameters after the producer's own: the chain's inputs, O, the chain's scalars.
  std::string extra;
  for (size_t i = 0; i < group.inputs.size(); ++i)
    extra += fmt::format(", E{}: {}", i, p->tensor_type);
  extra += fmt::format(", O: {}", p->tensor_type);
  for (size_t i = 0; i < group.scalars.size(); ++i)
    extra += fmt::format(", s{}: f32", i);
  kernel.insert(params_end, extra);
  // The launch's specialisation (BIAS, ACT) becomes the defaults: launch_source passes none.
  for (const auto& [name, value] : producer.params) {
    if (name == "T") continue;
    const size_t at_param = kernel.find(" " + name + " = ");
    if (at_param == std::string::npos || at_param > kernel.find(">(")) return "";
    const size_t start = at_param + name.size() + 4;
    const size_t stop = kernel.find_first_of(",>", start);
    kernel.replace(start, stop - start, value);
  }
  const std::string hash = hash_hex(hash_text(kernel)).substr(0, 12);
  kernel.replace(0, head.size(), "kernel fused_" + p->kernel + "_" + hash + "<");
  return fmt::format(
      "# Generated by graph/fusion.cpp: kernels/{}'s {} with {} element-wise launches as its "
      "epilogue.\n{}",
      p->file, p->kernel, group.nodes.size() - 1, kernel);
}

}  // namespace tessel::graph
