// `tessel bench secure-agg`: the cost of Paillier secure aggregation (secure/paillier.h) against
// plaintext averaging, for one model update of --values reals (default: the 535,818 parameters of
// examples/fashion_mlp.toml) and --owners data owners: encrypt (an owner, with its key's CRT),
// add (the aggregator, one ciphertext multiplication per owner), decrypt (an owner: its 1/K
// share of the sum, as train/federated.h splits it), as throughput and as seconds per round, next
// to plaintext averaging of the same floats (the peer). Encryption and decryption use every core
// (as an owner does), adding and the peer one; the ratio is per round and per owner. Beside the
// wall-clock rates, CPU milliseconds per ciphertext (all threads of this process): the figure to
// compare on a machine others load.
//
//   tessel bench secure-agg                          # 2048-bit key, 535,818 values, 2 and 4 owners
//   tessel bench secure-agg --values 100000 --bits 3072 --owners 2,8
#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "secure/paillier.h"
#include "support/random.h"

namespace tessel::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
double cpu_since(std::clock_t t) {
  return double(std::clock() - t) / CLOCKS_PER_SEC;
}

struct Options {
  int64_t values = 535'818;
  int bits = 2048;
  std::vector<int> owners = {2, 4};
  int64_t sample = 400;  // ciphertexts timed; the round is extrapolated from their rate
};

int run(const Options& o) {
  Clock::time_point t = Clock::now();
  const secure::PaillierPrivateKey key = secure::PaillierPrivateKey::generate(o.bits);
  const double keygen = since(t);
  const secure::PaillierPublicKey& pub = key.public_key();
  // Timed with two owners' headroom; each row of the round table packs for its owner count.
  const secure::PackedCodec codec = secure::PackedCodec::for_summands(o.bits, 2);
  const int64_t sample_values = std::min<int64_t>(o.values, o.sample * codec.slots);
  Pcg32 rng(1);
  std::vector<float> update(static_cast<size_t>(sample_values));
  for (float& x : update)
    x = float(int64_t(rng.below(2001)) - 1000) * 1e-5f;

  t = Clock::now();
  std::clock_t cpu = std::clock();
  std::vector<secure::Ciphertext> c = key.encrypt_values(codec, update).value();
  const double encrypt = since(t) / double(c.size());
  const double encrypt_cpu = cpu_since(cpu) / double(c.size());
  std::vector<secure::Ciphertext> other = key.encrypt_values(codec, update).value();
  t = Clock::now();
  cpu = std::clock();
  pub.add_into(c, other);
  const double add = since(t) / double(c.size());
  const double add_cpu = cpu_since(cpu) / double(c.size());
  t = Clock::now();
  cpu = std::clock();
  const std::vector<double> sum = key.decrypt_values(codec, c, sample_values, 2);
  const double decrypt = since(t) / double(c.size());
  const double decrypt_cpu = cpu_since(cpu) / double(c.size());
  double worst = 0.0;
  for (size_t i = 0; i < sum.size(); ++i)
    worst = std::max(worst, std::abs(sum[i] - 2.0 * double(update[i])));

  fmt::print(
      "Paillier {}-bit modulus (key generated in {:.2f} s), {} values per ciphertext "
      "({}-bit slots: {} fraction bits, {} value bits, {} headroom bits), {} bytes each; "
      "{} cores\n",
      pub.bits(), keygen, codec.slots, codec.slot_bits, codec.frac_bits, codec.value_bits,
      codec.headroom_bits, pub.ciphertext_bytes(), std::thread::hardware_concurrency());
  fmt::print(
      "timed on {} ciphertexts ({} values); largest error of a decrypted 2-owner sum: "
      "{:.2e} (bound {:.2e})\n\n",
      c.size(), sample_values, worst, 2 * std::ldexp(1.0, -(codec.frac_bits + 1)));
  fmt::print("{:<10} {:>14} {:>16} {:>18}\n", "operation", "ciphertexts/s", "values/s",
             "CPU ms/ciphertext");
  for (auto [name, seconds, cpu_seconds] : {std::tuple{"encrypt", encrypt, encrypt_cpu},
                                            {"add", add, add_cpu},
                                            {"decrypt", decrypt, decrypt_cpu}})
    fmt::print("{:<10} {:>14.0f} {:>16.0f} {:>18.4f}\n", name, 1.0 / seconds, codec.slots / seconds,
               cpu_seconds * 1e3);

  // Plaintext averaging of the whole update: the peer.
  std::vector<std::vector<float>> updates(8, std::vector<float>(size_t(o.values), 0.001f));
  fmt::print("\none round, {} values:\n", o.values);
  fmt::print("{:<7} {:>6} {:>12} {:>12} {:>14} {:>12} {:>14} {:>13} {:>10}\n", "owners", "slots",
             "ciphertexts", "owner enc s", "aggregator s", "owner dec s", "plain avg s",
             "bytes/owner", "overhead");
  for (int owners : o.owners) {
    const secure::PackedCodec packing = secure::PackedCodec::for_summands(o.bits, owners);
    const int64_t per_round = packing.ciphertexts_for(o.values);
    t = Clock::now();
    std::vector<double> total(size_t(o.values), 0.0);
    for (int k = 0; k < owners; ++k) {
      const std::vector<float>& u = updates[size_t(k % 8)];
      for (size_t i = 0; i < total.size(); ++i)
        total[i] += u[i];
    }
    for (double& x : total)
      x /= owners;
    const double plain = since(t);
    const double enc = encrypt * double(per_round);
    const double dec = decrypt * double((per_round + owners - 1) / owners);
    const double agg = add * double(per_round) * double(owners - 1);
    // An owner's critical path: encrypt, wait for the aggregator, decrypt.
    const double secure_round = enc + agg + dec;
    fmt::print("{:<7} {:>6} {:>12} {:>12.2f} {:>14.2f} {:>12.2f} {:>14.4f} {:>13} {:>9.0f}x\n",
               owners, packing.slots, per_round, enc, agg, dec, plain,
               per_round * int64_t(pub.ciphertext_bytes()), secure_round / plain);
  }
  fmt::print(
      "\n(plaintext sends {} bytes per owner as float32; overhead = (encrypt + aggregate + "
      "decrypt) / plaintext averaging, per round)\n",
      o.values * 4);
  return 0;
}

}  // namespace

void add_bench_secure_agg_command(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "secure-agg", "Paillier encrypt/add/decrypt throughput and per-round cost vs plaintext");
  cmd->add_option("--values", o->values, "reals per update (fashion_mlp: 535818)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--bits", o->bits, "modulus bits (>= 2048)")->check(CLI::Range(2048, 8192));
  cmd->add_option("--owners", o->owners, "owner counts to cost")
      ->delimiter(',')
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--sample", o->sample, "ciphertexts to time")->check(CLI::PositiveNumber);
  cmd->callback([o] { exit_code = run(*o); });
}

}  // namespace tessel::cli
