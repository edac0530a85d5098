// Paillier: the key decrypts a ciphertext made here by the textbook formula g^m r^n mod n^2
// (independent of the key's CRT paths); Enc(a) Enc(b)
// decrypts to a + b; the owners' derived keys agree and differ across secrets; packed sums of
// several owners' reals come back within the fixed-point bound.
#include "secure/paillier.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace tessel::secure
