// The expressions of the fusible element-wise kernels (see fusible.h). Keep each in step with its
// kernel: kernels/elementwise.tile (unary, binary), kernels/activation.tile (activation,
// unary_grad).
#include "graph/fusible.h"

#include <map>

namespace tessel::graph {
namespace {

int op_number(const ops::KernelParams& params, int fallback) {
  auto it = params.find("OP");
  if (it == params.end()) return fallback;
  try {
    return std::stoi(it->second);
  } catch (...) {
    return -1;
  }
}

// unary: Y = op(scale * X).
std::optional<std::string> unary(int op, const std::string& a, const std::string& s) {
  const std::string x = "(" + s + " * " + a + ")";
  static const std::map<int, std::string> functions = {
      {1, "relu"}, {2, "gelu"}, {3, "sigmoid"}, {4, "tanh"}, {5, "exp"},
      {6, "log"},  {7, "sqrt"}, {8, "rsqrt"},   {9, "abs"},  {11, "erf"}};
  if (op == 0) return x;
  if (op == 10) return "(-" + x + ")";
  auto it = functions.find(op);
  if (it == functions.end()) return std::nullopt;
  return it->second + "(" + x + ")";
}

// binary: Z = X op Y.
std::optional<std::string> binary(int op, const std::string& a, const std::string& b) {
  switch (op) {
    case 0:
      return "(" + a + " + " + b + ")";
    case 1:
      return "(" + a + " - " + b + ")";
    case 2:
      return "(" + a + " * " + b + ")";
    case 3:
      return "(" + a + " / " + b + ")";
    case 4:
      return "max(" + a + ", " + b + ")";
    case 5:
      return "min(" + a + ", " + b + ")";
    case 6:
      return "pow(" + a + ", " + b + ")";
  }
  return std::nullopt;
}

// activation: silu (12) and the exact gelu (13).
std::optional<std::string> activation(int op, const std::string& x) {
  if (op == 12) return "(" + x + " * sigmoid(" + x + "))";
  if (op == 13) return "(0.5 * " + x + " * (1.0 + erf(" + x + " * 0.7071067811865476)))";
  return std::nullopt;
}

// unary_grad: dX = dY * f'(V), V the input (relu, gelu, silu, exact gelu) or the output
// (sigmoid, tanh, rsqrt) of the activation.
std::optional<std::string> unary_grad(int op, const std::string& v, const std::string& g) {
  std::string d;
  switch (op) {
    case 1:
      d = "select(" + v + " > 0.0, 1.0, 0.0)";
      break;
    case 2: {
      const std::string s = "sigmoid(1.5957691216057308 * (" + v + " + 0.044715 * " + v + " * " +
                            v + " * " + v + "))";
      d = "(" + s + " + 1.5957691216057308 * " + v + " * " + s + " * (1.0 - " + s +
          ") * (1.0 + 0.134145 * " + v + " * " + v + "))";
      break;
    }
    case 3:
      d = "(" + v + " * (1.0 - " + v + "))";
      break;
    case 4:
      d = "(1.0 - " + v + " * " + v + ")";
      break;
    case 8:
      d = "(-0.5 * " + v + " * " + v + " * " + v + ")";
      break;
    case 12: {
      const std::string s = "sigmoid(" + v + ")";
      d = "(" + s + " * (1.0 + " + v + " * (1.0 - " + s + ")))";
      break;
    }
    case 13:
      d = "(0.5 * (1.0 + erf(" + v + " * 0.7071067811865476)) + " + v +
          " * 0.3989422804014327 * exp(-0.5 * " + v + " * " + v + "))";
      break;
    default:
      return std::nullopt;
  }
  return "(" + g + " * " + d + ")";
}

}  // namespace

std::optional<std::string> elementwise_expression(const std::string& kernel,
                                                  const ops::KernelParams& params,
                                                  const std::vector<std::string>& in,
                                                  const std::vector<std::string>& scalars) {
  // Only f32 kernels: a 16-bit intermediate would need the rounding its store made.
  if (auto t = params.find("T"); t != params.end() && t->second != "f32") return std::nullopt;
  for (const auto& [name, value] : params)
    if (name != "T" && name != "OP") return std::nullopt;  // block sizes, flags: not a plain map
  if (kernel == "unary" && in.size() == 1 && scalars.size() == 1)
    return unary(op_number(params, 0), in[0], scalars[0]);
  if (kernel == "binary" && in.size() == 2 && scalars.empty())
    return binary(op_number(params, 0), in[0], in[1]);
  if (kernel == "activation" && in.size() == 1 && scalars.empty())
    return activation(op_number(params, 12), in[0]);
  if (kernel == "unary_grad" && in.size() == 2 && scalars.empty())
    return unary_grad(op_number(params, 1), in[0], in[1]);
  return std::nullopt;
}

bool is_cheap_elementwise(const std::string& kernel, const ops::KernelParams& params) {
  if (kernel == "binary") return op_number(params, 0) >= 0 && op_number(params, 0) <= 5;
  // identity (scale), relu, abs, neg
  if (kernel == "unary") {
    const int op = op_number(params, 0);
    return op == 0 || op == 1 || op == 9 || op == 10;
  }
  // relu's, sigmoid's, tanh's and rsqrt's gradients are polynomials in the saved output.
  if (kernel == "unary_grad") {
    const int op = op_number(params, 1);
    return op == 1 || op == 3 || op == 4 || op == 8;
  }
  return false;
}

}  // namespace tessel::graph
