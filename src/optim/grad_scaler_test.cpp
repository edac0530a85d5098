// The fp16 loss scaler: its state machine against a sequence worked out by hand, unscaling
// against values computed here, inf/NaN detection, and its checkpoint state.
#include "optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tessel::optim {
namespace {

using nn::FlatParameters;

class Toy : public nn::Module {
 public:
  Toy() {
    register_parameter("w", {30, 50}, {});
    register_parameter("b", {7}, {});
  }
  std::string type_name() const override { return "Toy"; }
};

TEST(GradScaler, FollowsTheHandComputedSequence) {
  GradScaler s({.init_scale = 65536.0, .growth_interval = 3});
  // (found_inf, scale after, clean steps after), worked out by hand from the rules:
  // x0.5 and restart on inf; x2 and restart after 3 clean steps in a row.
  struct Step {
    bool inf;
    double scale;
    int64_t clean;
  };
  const Step steps[] = {{false, 65536, 1},  {false, 65536, 2},  {false, 131072, 0},
                        {true, 65536, 0},   {false, 65536, 1},  {true, 32768, 0},
                        {true, 16384, 0},   {false, 16384, 1},  {false, 16384, 2},
                        {false, 32768, 0},  {false, 32768, 1}};
  EXPECT_EQ(s.scale(), 65536.0);
  int i = 0;
  for (const Step& step : steps) {
    s.update(step.inf);
    EXPECT_EQ(s.scale(), step.scale) << "after update " << i;
    EXPECT_EQ(s.clean_steps(), step.clean) << "after update " << i;
    ++i;
  }
}

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler s;
  EXPECT_EQ(s.scale(), 65536.0);  // 2^16
  for (int i = 0; i < 1999; ++i)
    s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);  // the 2000th clean step
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.clean_steps(), 0);
  s.update(true);
  EXPECT_EQ(s.scale(), 65536.0);
}

TEST(GradScaler, UnscalesInPlaceAndFindsInfAndNan) {
  Toy toy;
  Pcg32 rng(1, 1);
  FlatParameters flat = FlatParameters::create(toy, cpu_device(), rng).value();
  const Tensor& grads = flat.groups()[0].grads;
  const int64_t n = grads.numel();
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = std::ldexp(static_cast<float>(std::sin(0.3 * double(i))), 16);  // x 2^16
  Tensor host = Tensor::from_vector(values, {n}).value();
  Tensor target = grads;
  ASSERT_TRUE(target.copy_from(host).ok());

  GradScaler s;
  EXPECT_FALSE(s.unscale(flat).value());
  std::vector<float> got = grads.to_vector<float>().value();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], static_cast<float>(std::sin(0.3 * double(i)))) << i;  // exact: / 2^16

  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    values.assign(n, 1.0f);
    values[1234] = bad;
    ASSERT_TRUE(target.copy_from(Tensor::from_vector(values, {n}).value()).ok());
    EXPECT_TRUE(s.unscale(flat).value()) << bad;
  }
}

TEST(GradScaler, StateRoundTripsAndBadStateIsAnError) {
  GradScaler s({.growth_interval = 5});
  s.update(true);
  s.update(false);
  s.update(false);
  GradScaler restored({.growth_interval = 5});
  ASSERT_TRUE(restored.restore(s.state()).ok());
  EXPECT_EQ(restored.scale(), 32768.0);
  EXPECT_EQ(restored.clean_steps(), 2);
  Status bad = restored.restore({{"scale", "-1"}, {"clean_steps", "0"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("scale '-1'"), std::string::npos) << bad.message();
  EXPECT_FALSE(restored.restore({{"scale", "2"}}).ok());
}

}  // namespace
}  // namespace tessel::optim
