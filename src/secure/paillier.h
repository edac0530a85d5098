// Paillier's additively homomorphic encryption over GMP, with fixed-point packing of many real
// numbers into one plaintext, for aggregating model updates that nobody but their owners can read.
//
//   PaillierPrivateKey key = PaillierPrivateKey::generate(2048);       // libsodium randomness
//   PaillierPrivateKey same = PaillierPrivateKey::derive(2048, owners_secret);   // every owner
//   const PaillierPublicKey& pub = key.public_key();                   // all the aggregator gets
//   PackedCodec codec(pub.bits());                                      // 51 values per ciphertext
//   auto c1 = key.encrypt_values(codec, update1), c2 = ...;             // owners
//   pub.add_into(c1, c2);                                              // aggregator: c1 *= c2
//   std::vector<double> sum = key.decrypt_values(codec, c1, values, /*summands=*/2);   // owners
//
// The scheme (Paillier 1999, with g = n + 1): n = p q for primes p, q of bits/2 bits each;
// Enc(m) = (1 + m n) r^n mod n^2 for a random r in Z*_n; Enc(a) Enc(b) = Enc(a + b mod n);
// Dec(c) = L(c^lambda mod n^2) mu mod n with L(x) = (x - 1) / n, lambda = lcm(p - 1, q - 1),
// mu = lambda^-1 mod n. The key's holder encrypts and decrypts through the Chinese remainder
// theorem modulo p^2 and q^2 (the same ciphertexts, about 3x faster). Primes: GMP's
// mpz_nextprime from a random start (libsodium's randombytes, or a deterministic stream from a
// shared secret so that every data owner derives the same key), then 40 more Miller-Rabin rounds.
//
// Packing (PackedCodec): a real x becomes the integer round(x 2^frac_bits) + 2^(value_bits - 1),
// which must lie in [0, 2^value_bits); slots of value_bits + headroom_bits bits hold one each, so
// up to 2^headroom_bits such plaintexts add without one slot carrying into the next. The
// rounding error of a sum of k values is at most k 2^-(frac_bits + 1).
#pragma once

#include <gmpxx.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "secure/secret_key.h"
#include "support/status.h"

namespace tessel::secure {

using Ciphertext = mpz_class;

struct PackedCodec {
  explicit PackedCodec(int modulus_bits, int frac_bits = 24, int value_bits = 32,
                       int headroom_bits = 8);
  int frac_bits, value_bits, headroom_bits, slot_bits;
  int slots;  // values per plaintext: (modulus_bits - 1) / slot_bits
  int64_t ciphertexts_for(int64_t values) const { return (values + slots - 1) / slots; }
  // The largest |x| that encodes.
  double range() const;
};

class PaillierPublicKey {
 public:
  explicit PaillierPublicKey(mpz_class n);
  const mpz_class& n() const { return n_; }
  int bits() const { return int(mpz_sizeinbase(n_.get_mpz_t(), 2)); }
  // Enc(m) with fresh randomness (anyone can; the aggregator never needs to).
  Ciphertext encrypt(const mpz_class& m) const;
  // sum[i] = sum[i] * other[i] mod n^2: the plaintexts add. Sizes must match (a bug otherwise).
  void add_into(std::vector<Ciphertext>& sum, const std::vector<Ciphertext>& other) const;
  // A ciphertext as exactly ciphertext_bytes() big-endian bytes, and back (checked < n^2).
  size_t ciphertext_bytes() const { return (mpz_sizeinbase(n2_.get_mpz_t(), 2) + 7) / 8; }
  void serialize(const Ciphertext& c, uint8_t* out) const;
  Expected<Ciphertext> deserialize(const uint8_t* in) const;

 private:
  friend class PaillierPrivateKey;
  mpz_class n_, n2_;
};

class PaillierPrivateKey {
 public:
  static PaillierPrivateKey generate(int bits);
  // The same key from the same secret (SecretKey bytes as the seed of libsodium's
  // randombytes_buf_deterministic).
  static PaillierPrivateKey derive(int bits, const SecretKey& secret);

  const PaillierPublicKey& public_key() const { return public_; }
  Ciphertext encrypt(const mpz_class& m) const;  // through CRT
  mpz_class decrypt(const Ciphertext& c) const;

  // values -> ciphertexts of their packed fixed-point codes; an error names the first value out
  // of the codec's range.
  Expected<std::vector<Ciphertext>> encrypt_values(const PackedCodec& codec,
                                                   std::span<const float> values) const;
  // The sum of `summands` packed plaintexts -> `count` reals (the sums of the values).
  std::vector<double> decrypt_values(const PackedCodec& codec,
                                     const std::vector<Ciphertext>& sums, int64_t count,
                                     int summands) const;

 private:
  PaillierPrivateKey(mpz_class p, mpz_class q);
  PaillierPublicKey public_;
  mpz_class p_, q_, p2_, q2_;
  mpz_class hp_, hq_;            // decryption: L_p(g^(p-1) mod p^2)^-1 mod p, likewise for q
  mpz_class q_inverse_p_;        // q^-1 mod p (CRT mod n)
  mpz_class q2_inverse_p2_;      // q^2^-1 mod p^2 (CRT mod n^2)
  mpz_class n_mod_phi_p2_, n_mod_phi_q2_;  // n mod p(p-1), n mod q(q-1): the r^n exponents
};

}  // namespace tessel::secure
