// Paillier over GMP (see paillier.h).
#include "secure/paillier.h"

#include <sodium.h>

#include <cmath>
#include <thread>

namespace tessel::secure {
namespace {

mpz_class from_bytes(const uint8_t* bytes, size_t size) {
  mpz_class x;
  mpz_import(x.get_mpz_t(), size, 1, 1, 0, 0, bytes);
  return x;
}

// A uniformly random unit of Z*_n (libsodium randomness; 64 extra bits make the bias negligible).
mpz_class random_unit(const mpz_class& n) {
  std::vector<uint8_t> bytes((mpz_sizeinbase(n.get_mpz_t(), 2) + 7) / 8 + 8);
  while (true) {
    randombytes_buf(bytes.data(), bytes.size());
    mpz_class r = from_bytes(bytes.data(), bytes.size()) % n;
    mpz_class g;
    mpz_gcd(g.get_mpz_t(), r.get_mpz_t(), n.get_mpz_t());
    if (r != 0 && g == 1) return r;
  }
}

mpz_class powm(const mpz_class& base, const mpz_class& exponent, const mpz_class& modulus) {
  mpz_class out;
  mpz_powm(out.get_mpz_t(), base.get_mpz_t(), exponent.get_mpz_t(), modulus.get_mpz_t());
  return out;
}

mpz_class invert(const mpz_class& a, const mpz_class& modulus) {
  mpz_class out;
  TESSEL_CHECK(mpz_invert(out.get_mpz_t(), a.get_mpz_t(), modulus.get_mpz_t()) != 0,
               "no inverse (the key's primes are not coprime)");
  return out;
}

// A prime of exactly `bits` bits (its top two bits set, so p q has 2 * bits bits) from random
// bytes: GMP's next probable prime above them, confirmed with 40 Miller-Rabin rounds.
mpz_class prime_from(const uint8_t* bytes, int bits) {
  mpz_class x = from_bytes(bytes, size_t(bits) / 8);
  mpz_setbit(x.get_mpz_t(), bits - 1);
  mpz_setbit(x.get_mpz_t(), bits - 2);
  mpz_class p;
  mpz_nextprime(p.get_mpz_t(), x.get_mpz_t());
  if (int(mpz_sizeinbase(p.get_mpz_t(), 2)) != bits || mpz_probab_prime_p(p.get_mpz_t(), 40) == 0)
    return 0;  // ran past 2^bits (or a composite slipped through): the caller draws again
  return p;
}

// Two primes from a source of random bytes (fill(buffer, size, attempt)).
template <typename Fill>
std::pair<mpz_class, mpz_class> prime_pair(int bits, Fill fill) {
  TESSEL_CHECK(bits >= 512 && bits % 16 == 0, "Paillier modulus of {} bits", bits);
  const int half = bits / 2;
  std::vector<uint8_t> bytes(size_t(half) / 8 * 2);
  for (uint64_t attempt = 0;; ++attempt) {
    fill(bytes.data(), bytes.size(), attempt);
    mpz_class p = prime_from(bytes.data(), half), q = prime_from(bytes.data() + half / 8, half);
    sodium_memzero(bytes.data(), bytes.size());
    if (p == 0 || q == 0 || p == q) continue;
    mpz_class g, phi = (p - 1) * (q - 1), n = p * q;
    mpz_gcd(g.get_mpz_t(), n.get_mpz_t(), phi.get_mpz_t());
    if (g == 1) return {p, q};
  }
}

// f(i) for i in [0, n), spread over the machine's cores (each ciphertext is independent work,
// and a fashion_mlp update is ten thousand of them).
template <typename F>
void parallel_for(size_t n, F f) {
  const size_t workers = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i)
      f(i);
    return;
  }
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (size_t i = w; i < n; i += workers)
        f(i);
    });
  for (std::thread& t : threads)
    t.join();
}

}  // namespace

PackedCodec::PackedCodec(int modulus_bits, int frac, int value, int headroom)
    : frac_bits(frac),
      value_bits(value),
      headroom_bits(headroom),
      slot_bits(value + headroom),
      slots((modulus_bits - 1) / (value + headroom)) {
  TESSEL_CHECK(slot_bits <= 64 && value_bits < 63 && slots > 0, "codec of {}-bit slots", slot_bits);
}

PackedCodec PackedCodec::for_summands(int modulus_bits, int summands, int frac) {
  TESSEL_CHECK(summands >= 1, "{} summands", summands);
  const int value = frac + kIntegerBits;
  int headroom = 0;
  while ((int64_t(1) << headroom) < summands)
    ++headroom;
  return PackedCodec(modulus_bits, frac, value, headroom);
}

double PackedCodec::range() const {
  return std::ldexp(1.0, value_bits - 1 - frac_bits);
}

// ---- fixed-base powers

FixedBasePowers::FixedBasePowers(const mpz_class& base, const mpz_class& modulus, int exponent_bits)
    : modulus_(modulus), bytes_((exponent_bits + 7) / 8) {
  table_.resize(size_t(bytes_) * 255);
  mpz_class b = base % modulus_;  // b^(256^i) for the current byte position i
  for (int i = 0; i < bytes_; ++i) {
    mpz_class* row = table_.data() + size_t(i) * 255;
    row[0] = b;
    for (int j = 1; j < 255; ++j) {
      mpz_mul(row[j].get_mpz_t(), row[j - 1].get_mpz_t(), b.get_mpz_t());
      mpz_mod(row[j].get_mpz_t(), row[j].get_mpz_t(), modulus_.get_mpz_t());
    }
    mpz_mul(b.get_mpz_t(), row[254].get_mpz_t(), b.get_mpz_t());  // b^256
    mpz_mod(b.get_mpz_t(), b.get_mpz_t(), modulus_.get_mpz_t());
  }
}

mpz_class FixedBasePowers::pow(const uint8_t* exponent) const {
  mpz_class out = 1, product;
  for (int i = 0; i < bytes_; ++i) {
    const uint8_t j = exponent[i];
    if (j == 0) continue;
    mpz_mul(product.get_mpz_t(), out.get_mpz_t(), table_[size_t(i) * 255 + j - 1].get_mpz_t());
    mpz_mod(out.get_mpz_t(), product.get_mpz_t(), modulus_.get_mpz_t());
  }
  return out;
}

// ---- public key

PaillierPublicKey::PaillierPublicKey(mpz_class n) : n_(std::move(n)), n2_(n_ * n_) {}

Ciphertext PaillierPublicKey::encrypt(const mpz_class& m) const {
  TESSEL_CHECK(init_sodium().ok(), "libsodium did not start");
  const mpz_class r = random_unit(n_);
  mpz_class c = (1 + m * n_) % n2_;
  return (c * powm(r, n_, n2_)) % n2_;
}

void PaillierPublicKey::add_into(std::vector<Ciphertext>& sum,
                                 const std::vector<Ciphertext>& other) const {
  TESSEL_CHECK(sum.size() == other.size(), "adding {} ciphertexts to {}", other.size(), sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] *= other[i];
    mpz_mod(sum[i].get_mpz_t(), sum[i].get_mpz_t(), n2_.get_mpz_t());
  }
}

void PaillierPublicKey::serialize(const Ciphertext& c, uint8_t* out) const {
  const size_t size = ciphertext_bytes();
  const size_t used = (mpz_sizeinbase(c.get_mpz_t(), 2) + 7) / 8;
  std::fill(out, out + size, 0);
  size_t written = 0;
  if (c != 0) mpz_export(out + (size - used), &written, 1, 1, 0, 0, c.get_mpz_t());
}

Expected<Ciphertext> PaillierPublicKey::deserialize(const uint8_t* in) const {
  mpz_class c = from_bytes(in, ciphertext_bytes());
  if (c <= 0 || c >= n2_) return invalid_argument("a ciphertext is not in (0, n^2)");
  return c;
}

// ---- private key

PaillierPrivateKey::PaillierPrivateKey(mpz_class p, mpz_class q)
    : public_(p * q), p_(std::move(p)), q_(std::move(q)) {
  p2_ = p_ * p_;
  q2_ = q_ * q_;
  const mpz_class g = public_.n_ + 1;
  hp_ = invert((powm(g, p_ - 1, p2_) - 1) / p_, p_);
  hq_ = invert((powm(g, q_ - 1, q2_) - 1) / q_, q_);
  q_inverse_p_ = invert(q_, p_);
  q2_inverse_p2_ = invert(q2_, p2_);
  // h_n = (-x^2)^n mod n^2 for a random x (DJN 2010), as residues mod p^2 and q^2 (the exponent n
  // reduced mod phi(p^2) = p (p - 1)), and the tables of its powers for exponents of bits/2 bits.
  TESSEL_CHECK(init_sodium().ok(), "libsodium did not start");
  const mpz_class x = random_unit(public_.n_);
  const mpz_class h = public_.n_ - (x * x) % public_.n_;
  const int exponent_bits = public_.bits() / 2;
  h_n_p2_ = std::make_shared<const FixedBasePowers>(
      powm(h % p2_, public_.n_ % (p_ * (p_ - 1)), p2_), p2_, exponent_bits);
  h_n_q2_ = std::make_shared<const FixedBasePowers>(
      powm(h % q2_, public_.n_ % (q_ * (q_ - 1)), q2_), q2_, exponent_bits);
}

PaillierPrivateKey PaillierPrivateKey::generate(int bits) {
  TESSEL_CHECK(init_sodium().ok(), "libsodium did not start");
  auto [p, q] =
      prime_pair(bits, [](uint8_t* out, size_t size, uint64_t) { randombytes_buf(out, size); });
  return PaillierPrivateKey(std::move(p), std::move(q));
}

PaillierPrivateKey PaillierPrivateKey::derive(int bits, const SecretKey& secret) {
  auto [p, q] = prime_pair(bits, [&](uint8_t* out, size_t size, uint64_t attempt) {
    // seed = BLAKE2b-256(key = secret, "tessel paillier" || attempt || bits)
    unsigned char label[32] = "tessel paillier";
    for (int i = 0; i < 8; ++i)
      label[16 + i] = uint8_t(attempt >> (8 * i));
    label[24] = uint8_t(bits >> 8);
    label[25] = uint8_t(bits);
    unsigned char seed[randombytes_SEEDBYTES];
    crypto_generichash(seed, sizeof seed, label, sizeof label, secret.data(), SecretKey::kBytes);
    randombytes_buf_deterministic(out, size, seed);
    sodium_memzero(seed, sizeof seed);
  });
  return PaillierPrivateKey(std::move(p), std::move(q));
}

Ciphertext PaillierPrivateKey::encrypt(const mpz_class& m) const {
  // r^n = h_n^a mod n^2 for a random exponent a, from h_n^a mod p^2 and mod q^2.
  std::vector<uint8_t> exponent(size_t(h_n_p2_->exponent_bytes()));
  randombytes_buf(exponent.data(), exponent.size());
  const mpz_class a = h_n_p2_->pow(exponent.data()), b = h_n_q2_->pow(exponent.data());
  sodium_memzero(exponent.data(), exponent.size());
  mpz_class t = ((a - b) * q2_inverse_p2_) % p2_;
  if (t < 0) t += p2_;
  const mpz_class rn = b + q2_ * t;
  const mpz_class c = (1 + m * public_.n_) % public_.n2_;
  return (c * rn) % public_.n2_;
}

mpz_class PaillierPrivateKey::decrypt(const Ciphertext& c) const {
  const mpz_class mp = ((powm(c % p2_, p_ - 1, p2_) - 1) / p_ * hp_) % p_;
  const mpz_class mq = ((powm(c % q2_, q_ - 1, q2_) - 1) / q_ * hq_) % q_;
  mpz_class t = ((mp - mq) * q_inverse_p_) % p_;
  if (t < 0) t += p_;
  return mq + q_ * t;
}

Expected<std::vector<Ciphertext>> PaillierPrivateKey::encrypt_values(
    const PackedCodec& codec, std::span<const float> values) const {
  const double scale = std::ldexp(1.0, codec.frac_bits);
  const int64_t offset = int64_t(1) << (codec.value_bits - 1);
  const int64_t limit = int64_t(1) << codec.value_bits;
  std::vector<mpz_class> plaintexts;
  plaintexts.reserve(size_t(codec.ciphertexts_for(int64_t(values.size()))));
  for (size_t begin = 0; begin < values.size(); begin += size_t(codec.slots)) {
    const size_t end = std::min(values.size(), begin + size_t(codec.slots));
    mpz_class m = 0;
    for (size_t i = end; i-- > begin;) {  // value `begin` lands in the lowest slot
      const double x = double(values[i]);
      const int64_t code = std::isfinite(x) ? std::llround(x * scale) + offset : -1;
      if (code < 0 || code >= limit)
        return out_of_range("value {} = {} is outside the packing range +-{} (frac_bits {})", i, x,
                            codec.range(), codec.frac_bits);
      mpz_mul_2exp(m.get_mpz_t(), m.get_mpz_t(), mp_bitcnt_t(codec.slot_bits));
      m += static_cast<unsigned long>(code);
    }
    plaintexts.push_back(std::move(m));
  }
  std::vector<Ciphertext> out(plaintexts.size());
  parallel_for(out.size(), [&](size_t j) { out[j] = encrypt(plaintexts[j]); });
  return out;
}

std::vector<double> PaillierPrivateKey::decrypt_values(const PackedCodec& codec,
                                                       std::span<const Ciphertext> sums,
                                                       int64_t count, int summands) const {
  TESSEL_CHECK(summands >= 1 && summands <= (1 << codec.headroom_bits), "{} summands", summands);
  const double scale = std::ldexp(1.0, -codec.frac_bits);
  const int64_t offset = int64_t(summands) << (codec.value_bits - 1);
  std::vector<double> out;
  out.reserve(size_t(count));
  std::vector<mpz_class> plaintexts(sums.size());
  parallel_for(sums.size(), [&](size_t j) { plaintexts[j] = decrypt(sums[j]); });
  for (mpz_class& m : plaintexts) {
    mpz_class slot;
    for (int s = 0; s < codec.slots && int64_t(out.size()) < count; ++s) {
      mpz_fdiv_r_2exp(slot.get_mpz_t(), m.get_mpz_t(), mp_bitcnt_t(codec.slot_bits));
      mpz_fdiv_q_2exp(m.get_mpz_t(), m.get_mpz_t(), mp_bitcnt_t(codec.slot_bits));
      const int64_t code = int64_t(mpz_get_ui(slot.get_mpz_t()));
      out.push_back(double(code - offset) * scale);
    }
  }
  return out;
}

}  // namespace tessel::secure
