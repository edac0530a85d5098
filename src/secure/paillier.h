// Paillier's additively homomorphic encryption over GMP, with fixed-point packing of many real
// numbers into one plaintext, for aggregating model updates that nobody but their owners can read.
//
//   PaillierPrivateKey key = PaillierPrivateKey::generate(2048);       // libsodium randomness
//   PaillierPrivateKey same = PaillierPrivateKey::derive(2048, owners_secret);   // every owner
//   const PaillierPublicKey& pub = key.public_key();                   // all the aggregator gets
//   PackedCodec codec = PackedCodec::for_summands(pub.bits(), owners);  // 60 values for 4 owners
//   auto c1 = key.encrypt_values(codec, update1), c2 = ...;             // owners
//   pub.add_into(c1, c2);                                              // aggregator: c1 *= c2
//   std::vector<double> sum = key.decrypt_values(codec, c1, values, /*summands=*/2);   // owners
//
// The scheme (Paillier 1999, with g = n + 1): n = p q for primes p, q of bits/2 bits each;
// Enc(m) = (1 + m n) r^n mod n^2 for a random r in Z*_n; Enc(a) Enc(b) = Enc(a + b mod n);
// Dec(c) = L(c^lambda mod n^2) mu mod n with L(x) = (x - 1) / n, lambda = lcm(p - 1, q - 1),
// mu = lambda^-1 mod n. g = n + 1 makes g^m the product 1 + m n (no exponentiation). Anyone can
// encrypt with the public key as above. The key's holder encrypts with the short-exponent
// randomness of Damgard, Jurik and Nielsen (2010, "A generalization of Paillier's public-key
// system"): r^n = h_n^a for a fixed h_n = (-x^2)^n mod n^2 (x random) and a uniformly random
// exponent a of bits/2 bits, the powers of h_n read from precomputed tables modulo p^2 and q^2
// (FixedBasePowers: bits/16 modular products, no squarings) and joined by the Chinese remainder
// theorem; it decrypts modulo p^2 and q^2 likewise. Primes: GMP's mpz_nextprime from a random
// start (libsodium's randombytes, or a deterministic stream from a shared secret so that every
// data owner derives the same key), then 40 more Miller-Rabin rounds.
//
// Packing (PackedCodec): a real x becomes the integer round(x 2^frac_bits) + 2^(value_bits - 1),
// which must lie in [0, 2^value_bits); slots of value_bits + headroom_bits bits hold one each, so
// up to 2^headroom_bits such plaintexts add without one slot carrying into the next (for_summands
// picks the fewest headroom bits for a number of owners). The sum decodes exactly to the sum of
// the rounded values; its error against the sum of the reals is at most k 2^-(frac_bits + 1) for
// k values.
#pragma once

#include <gmpxx.h>

#include <cstdint>
#include <memory>
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
  // The codec whose slots just hold the sum of `summands` values: ceil(log2(summands)) headroom
  // bits, values of frac_bits + kIntegerBits bits (|x| < 128). The default 40 fraction bits put
  // the rounding (2^-41) below a float's resolution at the size of a model update, so the
  // decrypted average is the plaintext float average (at 24 bits it was not: the rounding moved
  // federated fashion_mlp's final accuracy by up to 0.28 points, seed to seed). A 2048-bit
  // modulus packs 41 values for 2 owners, 40 for 4 and 8.
  static constexpr int kDefaultFracBits = 40;
  static constexpr int kIntegerBits = 8;
  static PackedCodec for_summands(int modulus_bits, int summands, int frac_bits = kDefaultFracBits);
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

// b^e mod m for one base b and many exponents e of up to `exponent_bits` bits: a table of
// b^(j 256^i) for every byte position i and byte value j in [1, 255] (exponent_bits / 8 * 255
// residues), so that a power is one modular product per non-zero byte of e.
class FixedBasePowers {
 public:
  FixedBasePowers(const mpz_class& base, const mpz_class& modulus, int exponent_bits);
  int exponent_bytes() const { return bytes_; }
  // exponent: exponent_bytes() bytes, least significant first.
  mpz_class pow(const uint8_t* exponent) const;

 private:
  mpz_class modulus_;
  int bytes_;
  std::vector<mpz_class> table_;  // [i * 255 + j - 1] = b^(j 256^i) mod m
};

class PaillierPrivateKey {
 public:
  static PaillierPrivateKey generate(int bits);
  // The same key from the same secret (SecretKey bytes as the seed of libsodium's
  // randombytes_buf_deterministic).
  static PaillierPrivateKey derive(int bits, const SecretKey& secret);

  const PaillierPublicKey& public_key() const { return public_; }
  // Enc(m) with short-exponent randomness from the fixed-base tables, through CRT.
  Ciphertext encrypt(const mpz_class& m) const;
  mpz_class decrypt(const Ciphertext& c) const;

  // values -> ciphertexts of their packed fixed-point codes; an error names the first value out
  // of the codec's range.
  Expected<std::vector<Ciphertext>> encrypt_values(const PackedCodec& codec,
                                                   std::span<const float> values) const;
  // The sum of `summands` packed plaintexts -> `count` reals (the sums of the values).
  // Any run of whole ciphertexts decodes on its own (an owner may decrypt a share of the sum).
  std::vector<double> decrypt_values(const PackedCodec& codec, std::span<const Ciphertext> sums,
                                     int64_t count, int summands) const;

 private:
  PaillierPrivateKey(mpz_class p, mpz_class q);
  PaillierPublicKey public_;
  mpz_class p_, q_, p2_, q2_;
  mpz_class hp_, hq_;        // decryption: L_p(g^(p-1) mod p^2)^-1 mod p, likewise for q
  mpz_class q_inverse_p_;    // q^-1 mod p (CRT mod n)
  mpz_class q2_inverse_p2_;  // q^2^-1 mod p^2 (CRT mod n^2)
  // h_n's powers modulo p^2 and q^2 (shared by copies of the key: they are read-only).
  std::shared_ptr<const FixedBasePowers> h_n_p2_, h_n_q2_;
};

}  // namespace tessel::secure
