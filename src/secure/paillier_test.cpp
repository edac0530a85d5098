// Paillier: the key decrypts a ciphertext made here by the textbook formula g^m r^n mod n^2
// (independent of the key's CRT paths); Enc(a) Enc(b)
// decrypts to a + b; the owners' derived keys agree and differ across secrets; packed sums of
// several owners' reals come back within the fixed-point bound, and exactly as the sum of the
// rounded values computed in int64 here; the fixed-base table's powers equal mpz_powm's; packing
// takes just the headroom its owners need, and refuses values outside its range at both ends.
#include "secure/paillier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/random.h"

namespace tessel::secure {
namespace {

const PaillierPrivateKey& test_key() {
  static const PaillierPrivateKey key = PaillierPrivateKey::generate(2048);
  return key;
}

TEST(Paillier, DecryptsAsTheTextbookAndAddsUnderEncryption) {
  const PaillierPrivateKey& key = test_key();
  const PaillierPublicKey& pub = key.public_key();
  EXPECT_EQ(pub.bits(), 2048);
  const mpz_class a("123456789012345678901234567890"), b("987654321098765432109876543210");
  // Both ways of encrypting (anyone's, the key holder's CRT) make ciphertexts that decrypt to m.
  const Ciphertext ca = pub.encrypt(a), cb = key.encrypt(b);
  EXPECT_NE(pub.encrypt(a), ca);  // fresh randomness each time
  EXPECT_EQ(key.decrypt(ca), a);
  EXPECT_EQ(key.decrypt(cb), b);
  std::vector<Ciphertext> sum = {ca}, other = {cb};
  pub.add_into(sum, other);
  EXPECT_EQ(key.decrypt(sum[0]), a + b);
  // Adding n - a gives 0: the plaintexts live mod n.
  std::vector<Ciphertext> zero = {ca}, minus_a = {pub.encrypt(pub.n() - a)};
  pub.add_into(zero, minus_a);
  EXPECT_EQ(key.decrypt(zero[0]), 0);

  // The reference: a ciphertext made by the textbook formula Enc(m) = g^m r^n mod n^2 with
  // g = n + 1 raised by modular exponentiation (the key uses 1 + m n and CRT).
  const mpz_class n = pub.n(), n2 = n * n, m("42424242424242424242");
  mpz_class gm, rn;
  const mpz_class g = n + 1, r("1234567891011121314151617181920");
  mpz_powm(gm.get_mpz_t(), g.get_mpz_t(), m.get_mpz_t(), n2.get_mpz_t());
  mpz_powm(rn.get_mpz_t(), r.get_mpz_t(), n.get_mpz_t(), n2.get_mpz_t());
  const mpz_class textbook = (gm * rn) % n2;
  EXPECT_EQ(key.decrypt(textbook), m);

  std::vector<uint8_t> bytes(pub.ciphertext_bytes());
  EXPECT_EQ(bytes.size(), 512u);
  pub.serialize(ca, bytes.data());
  Expected<Ciphertext> back = pub.deserialize(bytes.data());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, ca);
  std::fill(bytes.begin(), bytes.end(), 0xff);
  EXPECT_FALSE(pub.deserialize(bytes.data()).ok());
}

TEST(Paillier, OwnersDeriveTheSameKeyFromTheirSecret) {
  const SecretKey secret = SecretKey::generate(), other = SecretKey::generate();
  const PaillierPrivateKey a = PaillierPrivateKey::derive(2048, secret);
  const PaillierPrivateKey b = PaillierPrivateKey::derive(2048, secret);
  const PaillierPrivateKey c = PaillierPrivateKey::derive(2048, other);
  EXPECT_EQ(a.public_key().n(), b.public_key().n());
  EXPECT_NE(a.public_key().n(), c.public_key().n());
  EXPECT_EQ(a.public_key().bits(), 2048);
  EXPECT_EQ(b.decrypt(a.encrypt(mpz_class(77))), 77);
}

TEST(Paillier, PackedSumsOfOwnersUpdatesComeBackWithinTheFixedPointBound) {
  const PaillierPrivateKey& key = test_key();
  const PackedCodec codec(key.public_key().bits());
  EXPECT_EQ(codec.slots, 51);  // 2047 / 40
  const int owners = 3;
  const int64_t count = 130;  // three ciphertexts, the last one partly filled
  Pcg32 rng(11);
  std::vector<std::vector<float>> updates(owners, std::vector<float>(count));
  std::vector<double> want(count, 0.0);
  for (auto& u : updates)
    for (int64_t i = 0; i < count; ++i) {
      u[size_t(i)] = float((int64_t(rng.below(2000001)) - 1000000) * 1e-4);  // [-100, 100]
      want[size_t(i)] += double(u[size_t(i)]);
    }
  std::vector<Ciphertext> sum;
  for (const auto& u : updates) {
    Expected<std::vector<Ciphertext>> c = key.encrypt_values(codec, u);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_EQ(c->size(), 3u);
    if (sum.empty()) {
      sum = std::move(*c);
    } else {
      key.public_key().add_into(sum, *c);
    }
  }
  const std::vector<double> got = key.decrypt_values(codec, sum, count, owners);
  ASSERT_EQ(got.size(), size_t(count));
  const double bound = owners * std::ldexp(1.0, -(codec.frac_bits + 1));
  for (int64_t i = 0; i < count; ++i)
    EXPECT_NEAR(got[size_t(i)], want[size_t(i)], bound) << i;

  const std::vector<float> too_big = {1.0f, 200.0f};
  Expected<std::vector<Ciphertext>> bad = key.encrypt_values(codec, too_big);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("value 1 = 200"), std::string::npos)
      << bad.status().message();
}

TEST(Paillier, FixedBasePowersEqualModularExponentiation) {
  const mpz_class modulus(
      "0xC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B225"
      "14A08798E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E4"
      "85B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7EDEE386BFB5A899FA5AE9");
  const mpz_class base("0x123456789ABCDEF0FEDCBA9876543210");
  const FixedBasePowers powers(base, modulus, 200);
  EXPECT_EQ(powers.exponent_bytes(), 25);
  Pcg32 rng(5);
  std::vector<std::vector<uint8_t>> exponents = {std::vector<uint8_t>(25, 0),
                                                 std::vector<uint8_t>(25, 0xff)};
  for (int k = 0; k < 6; ++k) {
    std::vector<uint8_t> e(25);
    for (uint8_t& b : e)
      b = uint8_t(rng.below(256));
    exponents.push_back(e);
  }
  for (const std::vector<uint8_t>& e : exponents) {
    mpz_class exponent;  // least significant byte first
    mpz_import(exponent.get_mpz_t(), e.size(), -1, 1, 0, 0, e.data());
    mpz_class want;
    mpz_powm(want.get_mpz_t(), base.get_mpz_t(), exponent.get_mpz_t(), modulus.get_mpz_t());
    EXPECT_EQ(powers.pow(e.data()), want) << exponent.get_str(16);
  }
}

TEST(Paillier, PackingHeadroomFollowsTheNumberOfOwners) {
  // slots = (2048 - 1) / (48 value bits + ceil(log2(owners)) headroom bits)
  const std::vector<std::pair<int, int>> owners_slots = {{1, 42}, {2, 41}, {3, 40},  {4, 40},
                                                         {5, 40}, {8, 40}, {256, 36}};
  for (auto [owners, slots] : owners_slots) {
    const PackedCodec codec = PackedCodec::for_summands(2048, owners);
    EXPECT_EQ(codec.slots, slots) << owners << " owners";
    EXPECT_GE(1 << codec.headroom_bits, owners);
    EXPECT_LT(1 << codec.headroom_bits, 2 * owners);
  }
  EXPECT_EQ(PackedCodec::for_summands(2048, 4).ciphertexts_for(535'818), 13'396);
  // Fewer fraction bits pack more values: 24 (values of 32 bits) give 60 per ciphertext.
  EXPECT_EQ(PackedCodec::for_summands(2048, 4, 24).slots, 60);
}

// The packed sum of `owners` updates, decrypted.
std::vector<double> secure_sum(const PackedCodec& codec,
                               const std::vector<std::vector<float>>& updates) {
  const PaillierPrivateKey& key = test_key();
  std::vector<Ciphertext> sum;
  for (const auto& u : updates) {
    Expected<std::vector<Ciphertext>> c = key.encrypt_values(codec, u);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (!c.ok()) return {};
    if (sum.empty()) {
      sum = std::move(*c);
    } else {
      key.public_key().add_into(sum, *c);
    }
  }
  return key.decrypt_values(codec, sum, int64_t(updates[0].size()), int(updates.size()));
}

TEST(Paillier, PackedSumIsExactlyTheSumOfTheRoundedValues) {
  const int owners = 4;
  const PackedCodec codec = PackedCodec::for_summands(2048, owners);
  const int64_t count = 2 * codec.slots + 7;
  Pcg32 rng(21);
  std::vector<std::vector<float>> updates(owners, std::vector<float>(size_t(count)));
  std::vector<int64_t> want_codes(size_t(count), 0);  // the plaintext sum, in int64
  const double scale = std::ldexp(1.0, codec.frac_bits);
  for (auto& u : updates)
    for (int64_t i = 0; i < count; ++i) {
      // Mostly small updates of both signs, some near the ends of the range.
      const double r = (double(rng.below(1'000'001)) - 500'000.0) / 500'000.0;
      u[size_t(i)] = float(i % 5 == 0 ? 127.9 * r : 0.01 * r);
      want_codes[size_t(i)] += std::llround(double(u[size_t(i)]) * scale);
    }
  const std::vector<double> got = secure_sum(codec, updates);
  ASSERT_EQ(got.size(), size_t(count));
  for (int64_t i = 0; i < count; ++i)
    EXPECT_EQ(got[size_t(i)], double(want_codes[size_t(i)]) / scale) << i;
}

TEST(Paillier, PackedSumsAtTheEndsOfTheRangeDoNotCarryIntoTheNextSlot) {
  // Four owners (two headroom bits) all at the largest value, then all at the smallest, in
  // alternating slots: each slot's sum fills its 50 bits without touching its neighbours.
  const int owners = 4;
  const PackedCodec codec = PackedCodec::for_summands(2048, owners);
  // The largest float below the range (128 - 2^-17: codes 2^48 - 2^23) and the smallest in it.
  const float largest = std::nextafter(float(codec.range()), 0.0f),
              smallest = -float(codec.range());
  std::vector<float> u(size_t(codec.slots) + 3);
  for (size_t i = 0; i < u.size(); ++i)
    u[i] = i % 2 == 0 ? largest : smallest;
  const std::vector<double> got = secure_sum(codec, std::vector<std::vector<float>>(owners, u));
  ASSERT_EQ(got.size(), u.size());
  for (size_t i = 0; i < u.size(); ++i)
    EXPECT_EQ(got[i], owners * double(u[i])) << i;

  // One step past either end, and non-finite values, are refused naming the value.
  const PaillierPrivateKey& key = test_key();
  for (float bad :
       {float(codec.range()), std::nextafter(smallest, -1e9f),
        std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    const std::vector<float> values = {0.5f, -0.5f, bad};
    Expected<std::vector<Ciphertext>> c = key.encrypt_values(codec, values);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("value 2 = "), std::string::npos) << c.status().message();
  }
}

}  // namespace
}  // namespace tessel::secure
