// Pacing (pace.h): what a paced thread sleeps, checked with ops whose duration has a known lower
// bound (their forward sleeps). Only lower bounds that sleep_for guarantees are asserted, so a
// loaded machine cannot fail these: an op that sleeps s seconds took at least s, and a debt of d
// is paid by sleeping at least d.
#include "autograd/pace.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "autograd/variable.h"

namespace tessel::autograd {
namespace {

constexpr double kOpSleepS = 0.03, kWaitS = 0.2;

// An op whose forward sleeps kOpSleepS, or kWaitS inside a PaceExempt (a wait for other ranks).
ops::OpDef sleeping_op(bool exempt) {
  ops::OpDef op;
  op.name = exempt ? "test_waiting" : "test_computing";
  op.arity = 1;
  op.infer = [](const std::vector<ops::TensorMeta>& in,
                const ops::Attrs&) -> Expected<ops::TensorMeta> { return in[0]; };
  op.forward = [exempt](const std::vector<Tensor>& in, const ops::Attrs&,
                        const ops::TensorMeta&) -> Expected<Tensor> {
    if (exempt) {
      PaceExempt waiting;
      std::this_thread::sleep_for(std::chrono::duration<double>(kWaitS));
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(kOpSleepS));
    }
    return in[0];
  };
  op.save_inputs = {false};
  op.differentiable = {false};
  return op;
}

Variable input() {
  return Variable(Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, cpu_device()).value());
}

TEST(Pace, AnOpOwesWhatItTookTimesTheFactorLessOne) {
  const ops::OpDef op = sleeping_op(/*exempt=*/false);
  Pace pace(3.0);
  ASSERT_TRUE(apply(op, {input()}).ok());
  // 30 ms or more taken, so 60 ms or more owed: more than max_lag (1 ms), paid at once.
  EXPECT_GE(pace.paid_s(), 2 * kOpSleepS);
}

TEST(Pace, AFactorOfOneSleepsNothingAndNoPaceLeavesOpsAlone) {
  const ops::OpDef op = sleeping_op(false);
  {
    Pace pace(1.0);
    ASSERT_TRUE(apply(op, {input()}).ok());
    EXPECT_EQ(pace.paid_s(), 0.0);
  }
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(apply(op, {input()}).ok());  // no Pace: the timer does nothing, nothing owed
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            kOpSleepS);
}

// A wait inside an op pays what the thread owes first (a slower device reaches the
// synchronisation point later) and is not itself multiplied.
TEST(Pace, AnExemptWaitPaysTheDebtFirstAndIsNotMultiplied) {
  const ops::OpDef computing = sleeping_op(false), waiting = sleeping_op(true);
  Pace pace(2.0, /*max_lag_s=*/10.0);  // nothing is paid after an op: only by the wait or the end
  ASSERT_TRUE(apply(computing, {input()}).ok());
  EXPECT_EQ(pace.paid_s(), 0.0) << "paid before the lag was reached";
  ASSERT_TRUE(apply(waiting, {input()}).ok());
  const double paid_by_the_wait = pace.paid_s();
  EXPECT_GE(paid_by_the_wait, kOpSleepS) << "the wait did not pay the debt of the op before";
  // Had the 200 ms wait counted as the op's work, 200 ms more would be owed; what the waiting op
  // itself owes is its microseconds outside the wait (far under 100 ms however loaded).
  Pace inner(2.0, 10.0);
  ASSERT_TRUE(apply(waiting, {input()}).ok());
  inner.settle();
  EXPECT_LT(inner.paid_s(), kWaitS / 2);
}

TEST(Pace, TheScopePaysTheRestWhenItEnds) {
  const ops::OpDef computing = sleeping_op(false);
  const auto start = std::chrono::steady_clock::now();
  {
    Pace pace(2.0, /*max_lag_s=*/10.0);
    ASSERT_TRUE(apply(computing, {input()}).ok());
    EXPECT_EQ(pace.paid_s(), 0.0);
  }
  // The op's 30 ms, then at least 30 ms slept when the scope ended.
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            2 * kOpSleepS);
}

}  // namespace
}  // namespace tessel::autograd
