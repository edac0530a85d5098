// PyTorch fixtures of the op coverage tests: src/ops/testdata/<family>_cases.txt, written by
// tools/pytorch/coverage_fixtures.py. Each case names an op, a label, its attributes and named
// tensors (inputs, PyTorch's outputs, an output gradient and the input gradients):
//
//   for (const FixtureCase& c : read_fixture("pool")) { ... c.attrs ... c.tensor("x") ... }
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ops/op.h"

namespace tessel::ops::testing {

struct FixtureCase {
  std::string op, label;
  Attrs attrs;
  std::map<std::string, RefTensor> tensors;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const RefTensor& tensor(const std::string& name) const {
    static const RefTensor none;
    auto it = tensors.find(name);
    EXPECT_NE(it, tensors.end()) << op << " " << label << " has no tensor " << name;
    return it == tensors.end() ? none : it->second;
  }
  // The tensor's values as f32 (how the test's inputs are made).
  std::vector<float> floats(const std::string& name) const {
    const RefTensor& t = tensor(name);
    return std::vector<float>(t.values.begin(), t.values.end());
  }
};

inline std::string fixture_path(const std::string& family) {
  // ctest sets TESSEL_SOURCE_DIR; run by hand, the source tree is where this file was compiled.
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  std::filesystem::path root =
      source != nullptr
          ? std::filesystem::path(source)
          : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path();
  return (root / "src" / "ops" / "testdata" / (family + "_cases.txt")).string();
}

// Every case of src/ops/testdata/<family>_cases.txt (a test failure, and none, when unreadable).
inline std::vector<FixtureCase> read_fixture(const std::string& family) {
  std::vector<FixtureCase> cases;
  const std::string path = fixture_path(family);
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream words(line);
    std::string head;
    if (!(words >> head) || head[0] == '#') continue;
    if (head == "case") {
      cases.emplace_back();
      words >> cases.back().op >> cases.back().label;
      continue;
    }
    if (head == "end") continue;
    if (cases.empty()) {
      ADD_FAILURE() << path << ":" << number << ": " << head << " before any case";
      return cases;
    }
    FixtureCase& c = cases.back();
    std::string name;
    words >> name;
    if (head == "attr") {
      std::string kind, word;
      words >> kind;
      std::vector<int64_t> ints;
      std::vector<double> reals;
      while (words >> word) {
        reals.push_back(std::strtod(word.c_str(), nullptr));
        ints.push_back(std::strtoll(word.c_str(), nullptr, 10));
      }
      if (kind == "r") {  // one real (r), a list of reals (R), one integer (i), a list (I)
        c.attrs.set(name, reals.at(0));
      } else if (kind == "R") {
        c.attrs.set_reals(name, reals);
      } else if (kind == "i") {
        c.attrs.set(name, ints.at(0));
      } else {
        c.attrs.set(name, ints);
      }
    } else if (head == "tensor") {
      RefTensor t;
      size_t rank = 0;
      words >> rank;
      t.shape.resize(rank);
      for (int64_t& d : t.shape)
        words >> d;
      std::string colon, word;
      words >> colon;
      while (words >> word)
        t.values.push_back(std::strtod(word.c_str(), nullptr));  // takes nan, inf, -inf
      int64_t n = 1;
      for (int64_t d : t.shape)
        n *= d;
      EXPECT_EQ(static_cast<int64_t>(t.values.size()), n) << path << ":" << number;
      c.tensors[name] = std::move(t);
    } else {
      ADD_FAILURE() << path << ":" << number << ": unknown line " << head;
    }
  }
  return cases;
}

// got against want element by element: |got - want| <= abs + rel |want|, NaN where want is NaN,
// the same infinity where want is infinite.
inline void expect_matches(const std::vector<float>& got, const std::vector<double>& want,
                           double abs, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::fabs(g - w) <= abs + rel * std::fabs(w);
    if (!ok && ++misses <= 4)
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", want " << w;
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " differ";
}

}  // namespace tessel::ops::testing
