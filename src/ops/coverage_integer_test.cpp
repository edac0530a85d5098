// The element-wise ops on integer tensors (i8, u8, i16, i32, i64) and on mixed dtypes against
// PyTorch, on every device: src/ops/testdata/integer_cases.txt (tools/pytorch/integer_fixtures.py)
// holds PyTorch's exact results for each type's extremes (wrap-around on overflow), floor
// division and remainder with Python's sign rules, -2^63 / -1, integer pow, type promotion
// between integer types (u8 with i8: i16), with floats and with 0-d tensors; float floor_divide,
// remainder and div_trunc at zero divisors, infinities, -0.0 and NaN; and mixed floats (f32 with
// bf16, bf16 with f16, 0-d operands). The errors PyTorch raises (division by zero) are errors
// here too.
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
  o.dtype = parse_dtype(word).value();
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
    case DType::kI16:
      return make<int16_t>(d, o);
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
    default:  // floats, printed to 10 digits: f32 holds them, and rounds them back to f16 / bf16
      return cast(make<float>(d, o), o.dtype).value();
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
    case DType::kI16:
      return strings<int16_t>(t);
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

// A float output against PyTorch's: NaN where it is NaN, infinities and the sign of zero exact,
// else within a few units in the last place of the output's dtype (powf differs by an ulp or
// two between libraries; a 16-bit result rounds from f32).
void expect_float_values(const Tensor& out, const std::vector<std::string>& want_text) {
  std::vector<float> got = cast(out, DType::kF32).value().to_vector<float>().value();
  ASSERT_EQ(got.size(), want_text.size());
  const double ulp = out.dtype() == DType::kBF16  ? 0x1p-7
                     : out.dtype() == DType::kF16 ? 0x1p-10
                                                  : 2e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = std::stod(want_text[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << ": " << got[i];
    } else if (std::isinf(want) || want == 0) {
      EXPECT_EQ(got[i], want) << "element " << i;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << "element " << i << ": " << got[i];
    } else {
      EXPECT_NEAR(got[i], want, ulp * std::fabs(want)) << "element " << i;
    }
  }
}

TEST(OpIntegerCases, EveryCaseMatchesPyTorchOnEveryDevice) {
  std::vector<IntegerCase> cases = read_cases();
  ASSERT_GT(cases.size(), 350u);
  int checked = 0, i16_results = 0, float_divisions = 0, mixed_floats = 0;
  for (const IntegerCase& c : cases) {
    std::vector<DType> dtypes;
    for (const Operand& o : c.inputs)
      dtypes.push_back(o.dtype);
    checked += 1;
    i16_results += c.output.dtype == DType::kI16;
    const bool two_floats = c.inputs.size() >= 2 && is_floating_point(c.inputs.end()[-2].dtype) &&
                            is_floating_point(c.inputs.back().dtype);
    float_divisions += two_floats && (c.op == "floor_divide" || c.op == "remainder");
    mixed_floats += two_floats && c.inputs.end()[-2].dtype != c.inputs.back().dtype;
    for_each_device(c.op, dtypes, [&](Device* d) {
      SCOPED_TRACE(c.line);
      std::vector<Tensor> in;
      for (const Operand& o : c.inputs)
        in.push_back(make_tensor(d, o));
      Expected<Tensor> out = run_case(c, in);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(out->dtype(), c.output.dtype);
      EXPECT_EQ(out->shape(), c.output.shape);
      if (is_floating_point(c.output.dtype)) {
        expect_float_values(*out, c.output.values);
      } else {
        EXPECT_EQ(integer_strings(*out), c.output.values);
      }
    });
  }
  EXPECT_GT(checked, 350);
  EXPECT_GT(i16_results, 20);  // u8 with i8 among them
  EXPECT_GE(float_divisions, 6);
  EXPECT_GT(mixed_floats, 25);
}

// Mixed floats differentiate in the result's dtype; each input gets its gradient in its own
// dtype, summed over the dimensions it was broadcast along (PyTorch's autograd does the same).
TEST(OpIntegerCases, MixedFloatGradientsHaveTheirInputsDtypes) {
  for_each_device("mul", {DType::kBF16, DType::kF32}, [&](Device* d) {
    Tensor a = cast(floats(d, {1.5f, -2.0f, 0.25f, 4.0f}, {2, 2}), DType::kBF16).value();
    Tensor b = floats(d, {3.0f, 0.5f}, {2});
    Tensor g = floats(d, {1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
    for (const char* op : {"mul", "add", "remainder"}) {
      SCOPED_TRACE(op);
      EXPECT_EQ(run(op, {a, b}).value().dtype(), DType::kF32);
      std::vector<Tensor> grads = backward_of(op, {a, b}, g);
      ASSERT_EQ(grads.size(), 2u);
      EXPECT_EQ(grads[0].dtype(), DType::kBF16);
      EXPECT_EQ(grads[1].dtype(), DType::kF32);
      EXPECT_EQ(grads[1].shape(), (Shape{2}));
      std::vector<float> da = host(cast(grads[0], DType::kF32));
      std::vector<float> db = host(grads[1]);
      if (std::string(op) == "mul") {  // d/da = g b, d/db = sum over rows of g a
        EXPECT_EQ(da, (std::vector<float>{3.0f, 1.0f, 9.0f, 2.0f}));
        EXPECT_EQ(db, (std::vector<float>{1.5f + 0.75f, -4.0f + 16.0f}));
      } else if (std::string(op) == "remainder") {  // d/da = g, d/db = -g floor(a / b)
        EXPECT_EQ(da, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
        EXPECT_EQ(db, (std::vector<float>{-(1.0f * 0 + 3.0f * 0), -(2.0f * -4 + 4.0f * 8)}));
      }
    }
  });
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
    Tensor flag = bools(d, {true, false}, {2});
    expect_error(add(i, flag), Code::kInvalidArgument, {"add", "not bool tensors"});
    expect_error(pow(flag, i), Code::kInvalidArgument, {"pow", "not bool tensors"});
    expect_error(div(i, i, "round"), Code::kInvalidArgument, {"rounding_mode", "'round'"});
    if (d->kind() == DeviceKind::kCpu) {  // f64 tensors live on the host
      Tensor w = Tensor::from_vector(std::vector<double>{1, 2}, {2}, d).value();
      expect_error(add(f, w), Code::kInvalidArgument, {"add", "f64 takes no other float"});
    }
    // Empty integer tensors give empty results (and a zero-divisor check over nothing passes).
    Tensor none = Tensor::empty({0, 2}, DType::kI32, d).value();
    EXPECT_EQ(add(none, i).value().shape(), (Shape{0, 2}));
    EXPECT_EQ(floor_divide(i, none).value().shape(), (Shape{0, 2}));
    EXPECT_EQ(pow(none, i).value().shape(), (Shape{0, 2}));
    EXPECT_EQ(remainder(cast(none, DType::kF32).value(), f).value().shape(), (Shape{0, 2}));
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
    EXPECT_EQ(integer_strings(cast(longs(d, {70000, -32769, 32767, -5}, {4}), DType::kI16).value()),
              (std::vector<std::string>{"4464", "32767", "32767", "-5"}));
    Tensor i16 = cast(longs(d, {-32768, 5}, {2}), DType::kI16).value();
    EXPECT_EQ(host(cast(i16, DType::kF32)), (std::vector<float>{-32768, 5}));
    EXPECT_EQ(integer_strings(cast(floats(d, {-2.9f, 300.5f}, {2}), DType::kI16).value()),
              (std::vector<std::string>{"-2", "300"}));
    std::vector<float> f = host(cast(x, DType::kF32));
    EXPECT_EQ(f, (std::vector<float>{300, -129, 16777216, -1}));
    Tensor y = floats(d, {2.9f, -2.9f, 0.5f, -0.5f}, {4});
    EXPECT_EQ(integer_strings(cast(y, DType::kI32).value()),
              (std::vector<std::string>{"2", "-2", "0", "0"}));
  });
}

}  // namespace
}  // namespace tessel::ops
