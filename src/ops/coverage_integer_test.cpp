// The element-wise ops on integer tensors (i8, u8, i16, i32, i64) against PyTorch, on every
// device: src/ops/testdata/integer_cases.txt (tools/pytorch/integer_fixtures.py) holds PyTorch's
// exact results for each type's extremes (wrap-around on overflow), floor division and remainder
// with Python's sign rules, -2^63 / -1, type promotion between integer types, with floats and
// with 0-d tensors. The errors PyTorch raises (division by zero) are errors here too. Tensors have
// no i16 yet: the cases with an i16 operand are skipped, and u8 with i8 (i16 in PyTorch) must be
// an error that says so.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "ops/integer_ops.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"
#include "ops/testing/fixture.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/edge_check.h

// One tensor of a case: its dtype, shape and values as PyTorch printed them (exact integers).
struct Operand {
  bool i16 = false;  // a type tensors here lack
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<std::string> values;
};

struct IntegerCase {
  std::string line;
  std::string op, attrs;
  std::vector<Operand> inputs;
  Operand output;
};

Operand parse_operand(const std::string& text) {
  std::istringstream in(text);
  Operand o;
  std::string word;
  in >> word;
  o.i16 = word == "i16";
  o.dtype = o.i16 ? DType::kI32 : parse_dtype(word).value();
  while (in >> word && word != ":")
    o.shape.push_back(std::stoll(word));
  while (in >> word)
    o.values.push_back(word);
  return o;
}

std::vector<IntegerCase> read_cases() {
  std::vector<IntegerCase> cases;
  std::ifstream in(testing::fixture_path("integer"));
  EXPECT_TRUE(in) << "cannot read " << testing::fixture_path("integer");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::stringstream s(line);
    for (std::string f; std::getline(s, f, '|');)
      fields.push_back(f);
    IntegerCase c{line, fields[0], fields[1], {}, {}};
    size_t i = 2;
    for (; fields[i] != "="; ++i)
      c.inputs.push_back(parse_operand(fields[i]));
    c.output = parse_operand(fields[i + 1]);
    cases.push_back(std::move(c));
  }
  return cases;
}

template <typename T>
Tensor make(Device* d, const Operand& o) {
  std::vector<T> v;
  for (const std::string& s : o.values) {
    if constexpr (std::is_floating_point_v<T>)
      v.push_back(static_cast<T>(std::stod(s)));
    else
      v.push_back(static_cast<T>(std::stoll(s)));
  }
  return Tensor::from_vector(v, o.shape, d).value();
}

Tensor make_tensor(Device* d, const Operand& o) {
  switch (o.dtype) {
    case DType::kI8:
      return make<int8_t>(d, o);
    case DType::kU8:
      return make<uint8_t>(d, o);
    case DType::kI32:
      return make<int32_t>(d, o);
    case DType::kI64:
      return make<int64_t>(d, o);
    case DType::kBool: {
      std::vector<bool> v;
      for (const std::string& s : o.values)
        v.push_back(s == "1");
      return Tensor::from_vector(v, o.shape, d).value();
    }
    default:
      return make<float>(d, o);
  }
}

template <typename T>
std::vector<std::string> strings(const Tensor& t) {
  std::vector<std::string> out;
  const std::vector<T> values = t.to_vector<T>().value();
  for (T v : values)
    out.push_back(std::to_string(static_cast<int64_t>(v)));
  return out;
}

// The output's values as text, integers exactly (bool as 0 / 1); floats are compared apart.
std::vector<std::string> integer_strings(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kI8:
      return strings<int8_t>(t);
    case DType::kU8:
      return strings<uint8_t>(t);
    case DType::kI32:
      return strings<int32_t>(t);
    case DType::kI64:
      return strings<int64_t>(t);
    case DType::kBool: {
      std::vector<std::string> out;
      const std::vector<bool> values = t.to_vector<bool>().value();
      for (bool v : values)
        out.push_back(v ? "1" : "0");
      return out;
    }
    default:
      return {};
  }
}

Expected<Tensor> run_case(const IntegerCase& c, const std::vector<Tensor>& in) {
  if (c.op == "clamp") {
    std::istringstream a(c.attrs);
    double lo = 0, hi = 0;
    a >> lo >> hi;
    return clamp(in[0], lo, hi);
  }
  if (c.op == "div_trunc") return div(in[0], in[1], "trunc");
  return run(c.op, in);
}

TEST(OpIntegerCases, EveryCaseMatchesPyTorchOnEveryDevice) {
  std::vector<IntegerCase> cases = read_cases();
  ASSERT_GT(cases.size(), 200u);
  int checked = 0, i16_promotions = 0;
  for (const IntegerCase& c : cases) {
    std::vector<DType> dtypes;
    bool i16_input = false;
    for (const Operand& o : c.inputs) {
      dtypes.push_back(o.dtype);
      i16_input = i16_input || o.i16;
    }
    if (i16_input) continue;
    checked += 1;
    for_each_device(c.op, dtypes, [&](Device* d) {
      SCOPED_TRACE(c.line);
      std::vector<Tensor> in;
      for (const Operand& o : c.inputs)
        in.push_back(make_tensor(d, o));
      Expected<Tensor> out = run_case(c, in);
      if (c.output.i16) {  // u8 with i8
        expect_error(out, Code::kInvalidArgument, {"u8 with i8 promotes to i16"});
        i16_promotions += 1;
        return;
      }
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(out->dtype(), c.output.dtype);
      EXPECT_EQ(out->shape(), c.output.shape);
      if (c.output.dtype == DType::kF32) {
        std::vector<float> got = out->to_vector<float>().value();
        ASSERT_EQ(got.size(), c.output.values.size());
        for (size_t i = 0; i < got.size(); ++i) {
          double want = std::stod(c.output.values[i]);
          EXPECT_NEAR(got[i], want, 1e-6 * (1 + std::fabs(want))) << "element " << i;
        }
      } else {
        EXPECT_EQ(integer_strings(*out), c.output.values);
      }
    });
  }
  EXPECT_GT(checked, 150);
  EXPECT_GT(i16_promotions, 0);
}

// PyTorch raises ZeroDivisionError; the op fails before its kernel runs, on every device, where
// the divisor is a broadcast 0-d tensor too.
TEST(OpIntegerCases, IntegerDivisionByZeroIsAnError) {
  for_each_device("floor_divide", {DType::kI64, DType::kI64}, [&](Device* d) {
    Tensor a = longs(d, {7, -7, 3}, {3}), b = longs(d, {2, 0, 1}, {3});
    expect_error(floor_divide(a, b), Code::kInvalidArgument, {"floor_divide", "division by zero"});
    expect_error(remainder(a, b), Code::kInvalidArgument, {"remainder", "division by zero"});
    expect_error(div(a, b, "trunc"), Code::kInvalidArgument, {"div_trunc", "division by zero"});
    Tensor zero = Tensor::from_vector(std::vector<int32_t>{0}, Shape{}, d).value();
    expect_error(floor_divide(a, zero), Code::kInvalidArgument, {"division by zero"});
    // True division of integers is float division: x / 0 is inf or NaN, as in PyTorch.
    std::vector<float> q = host(div(a, b));
    EXPECT_EQ(q[1], -INFINITY);
    EXPECT_EQ(q[0], 3.5f);
  });
}

TEST(OpIntegerCases, UnsupportedMixesAreErrors) {
  for_each_device("add", {DType::kI32}, [&](Device* d) {
    Tensor i = Tensor::from_vector(std::vector<int32_t>{1, 2}, {2}, d).value();
    Tensor f = floats(d, {1, 2}, {2});
    Tensor h = cast(f, DType::kBF16).value();
    Tensor flag = bools(d, {true, false}, {2});
    expect_error(add(f, h), Code::kInvalidArgument, {"add", "float inputs must share one dtype"});
    expect_error(add(i, flag), Code::kInvalidArgument, {"add", "not bool tensors"});
    expect_error(pow(i, i), Code::kInvalidArgument, {"pow"});
    expect_error(floor_divide(f, f), Code::kUnimplemented, {"floor_divide", "integer tensors"});
    expect_error(div(i, i, "round"), Code::kInvalidArgument, {"rounding_mode", "'round'"});
    // Empty integer tensors give empty results (and a zero-divisor check over nothing passes).
    Tensor none = Tensor::empty({0, 2}, DType::kI32, d).value();
    EXPECT_EQ(add(none, i).value().shape(), (Shape{0, 2}));
    EXPECT_EQ(floor_divide(i, none).value().shape(), (Shape{0, 2}));
  });
}

// cast between integer types keeps the low bits; float to integer rounds toward zero; integer to
// float rounds to nearest (2^24 + 1 is not an f32).
TEST(OpIntegerCases, CastsWithAnIntegerSide) {
  for_each_device("cast", {DType::kI64}, [&](Device* d) {
    Tensor x = longs(d, {300, -129, 16777217, -1}, {4});
    EXPECT_EQ(integer_strings(cast(x, DType::kI8).value()),
              (std::vector<std::string>{"44", "127", "1", "-1"}));
    EXPECT_EQ(integer_strings(cast(x, DType::kU8).value()),
              (std::vector<std::string>{"44", "127", "1", "255"}));
    EXPECT_EQ(integer_strings(cast(x, DType::kI32).value()),
              (std::vector<std::string>{"300", "-129", "16777217", "-1"}));
    std::vector<float> f = host(cast(x, DType::kF32));
    EXPECT_EQ(f, (std::vector<float>{300, -129, 16777216, -1}));
    Tensor y = floats(d, {2.9f, -2.9f, 0.5f, -0.5f}, {4});
    EXPECT_EQ(integer_strings(cast(y, DType::kI32).value()),
              (std::vector<std::string>{"2", "-2", "0", "0"}));
  });
}

}  // namespace
}  // namespace tessel::ops
