// Pacing a thread's ops (pace.h).
#include "autograd/pace.h"

#include <chrono>
#include <thread>

namespace tessel::autograd {
namespace {

thread_local Pace* t_pace = nullptr;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Pace::Pace(double factor, double max_lag_s)
    : factor_(factor), max_lag_s_(max_lag_s), previous_(t_pace) {
  t_pace = this;
}

Pace::~Pace() {
  pay_all();
  t_pace = previous_;
}

void Pace::owe(double op_seconds) {
  if (op_seconds > 0) owed_s_ += (factor_ - 1.0) * op_seconds;
  if (owed_s_ >= max_lag_s_) pay_all();
}

void Pace::pay_all() {
  if (owed_s_ > 0) pay(owed_s_);
}

void Pace::pay(double seconds) {
  const double start = now_s();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double slept = now_s() - start;
  owed_s_ -= slept;  // an overshoot becomes credit
  paid_s_ += slept;
}

PaceExempt::PaceExempt() : pace_(t_pace) {
  if (!pace_) return;
  start_ = now_s();  // before paying: the sleep is not the enclosing op's work either
  pace_->pay_all();
}

PaceExempt::~PaceExempt() {
  if (pace_) pace_->exempt_s_ += now_s() - start_;
}

OpPaceTimer::OpPaceTimer() : pace_(t_pace) {
  if (!pace_ || pace_->depth_++ > 0) return;
  start_ = now_s();
  exempt_at_start_ = pace_->exempt_s_;
}

OpPaceTimer::~OpPaceTimer() {
  if (!pace_ || --pace_->depth_ > 0) return;
  pace_->owe(now_s() - start_ - (pace_->exempt_s_ - exempt_at_start_));
}

}  // namespace tessel::autograd
