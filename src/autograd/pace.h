// Pacing: makes the ops this thread runs take `factor` times as long, the way a slower device
// would run them, for benchmarks of unequal ranks (`tessel bench hetero --slow-by pace`).
//
//   {
//     autograd::Pace pace(2.0);  // from here on, this thread's ops take twice as long
//     TESSEL_ASSIGN_OR_RETURN(Variable loss, model_loss());
//     TESSEL_TRY(loss.backward());
//   }                            // the rest of what is owed is slept before the scope ends
//
// apply() times each op's forward and backward() each op's backward rule; after an op that took
// t seconds, the thread owes (factor - 1) t. It pays by sleeping once it owes more than
// `max_lag_s`, and what a sleep overshoots is credited to the next ops, so the total is exact while
// each sleep stays long enough to be worth a system call. Sleeping, not spinning: a slower device
// leaves the host core free while it computes, and on a machine whose cores are shared a spinning
// rank would slow the other ranks too.
//
// A synchronisation point must arrive when the slower device's work would reach it: code that
// waits for other ranks inside an op (SyncBatchNorm's all-reduce) opens a PaceExempt, which first
// pays everything owed and then keeps its own time out of the op's, so the wait is not multiplied.
#pragma once

namespace tessel::autograd {

class Pace {
 public:
  explicit Pace(double factor, double max_lag_s = 1e-3);
  ~Pace();  // pays the rest, then restores the pacing (if any) that was active before
  Pace(const Pace&) = delete;
  Pace& operator=(const Pace&) = delete;

  // Pays everything owed now (the destructor does too).
  void settle() { pay_all(); }
  // Seconds slept so far.
  double paid_s() const { return paid_s_; }

 private:
  friend class PaceExempt;
  friend class OpPaceTimer;
  void owe(double op_seconds);
  void pay_all();
  void pay(double seconds);

  double factor_, max_lag_s_;
  double owed_s_ = 0;  // negative: credit from a sleep that overshot
  double paid_s_ = 0;
  double exempt_s_ = 0;  // seconds spent in PaceExempt scopes, subtracted from enclosing ops
  int depth_ = 0;        // ops in progress (an op inside an op counts once)
  Pace* previous_;
};

// Not compute: a wait for other ranks. Pays what the thread owes, then keeps the time until the
// scope ends out of any op being timed. Does nothing when no Pace is active on the thread.
class PaceExempt {
 public:
  PaceExempt();
  ~PaceExempt();
  PaceExempt(const PaceExempt&) = delete;
  PaceExempt& operator=(const PaceExempt&) = delete;

 private:
  Pace* pace_;
  double start_ = 0;
};

// Times one op for the active Pace (autograd's own use: apply() and backward()).
class OpPaceTimer {
 public:
  OpPaceTimer();
  ~OpPaceTimer();
  OpPaceTimer(const OpPaceTimer&) = delete;
  OpPaceTimer& operator=(const OpPaceTimer&) = delete;

 private:
  Pace* pace_;
  double start_ = 0, exempt_at_start_ = 0;
};

}  // namespace tessel::autograd
