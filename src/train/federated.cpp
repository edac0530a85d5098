// The aggregator's and the owners' sides of a federated run (see federated.h).
#include "train/federated.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "secure/paillier.h"

namespace tessel::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr int kAggregator = 0;

Status wait(Expected<dist::Work> work, const std::string& what) {
  if (!work.ok()) return work.status().with_context("federated: {}", what);
  Status s = work->wait();
  return s.ok() ? s : s.with_context("federated: {}", what);
}

Status send_bytes(dist::ProcessGroup& g, const void* data, size_t size, int peer) {
  return wait(g.send(data, size, dist::DataType::kUint8, peer), fmt::format("send to {}", peer));
}
Status recv_bytes(dist::ProcessGroup& g, void* data, size_t size, int peer) {
  return wait(g.recv(data, size, dist::DataType::kUint8, peer),
              fmt::format("receive from {}", peer));
}

// The header owner 1 sends the aggregator: the number of values and the modulus n (0 when not
// secure), so that the aggregator knows sizes and the public key and nothing else.
struct Header {
  uint64_t values = 0;
  uint64_t modulus_bytes = 0;
};

std::vector<uint8_t> serialize(const secure::PaillierPublicKey& pub,
                               const std::vector<secure::Ciphertext>& c) {
  const size_t each = pub.ciphertext_bytes();
  std::vector<uint8_t> out(c.size() * each);
  for (size_t i = 0; i < c.size(); ++i)
    pub.serialize(c[i], out.data() + i * each);
  return out;
}

Expected<std::vector<secure::Ciphertext>> deserialize(const secure::PaillierPublicKey& pub,
                                                      std::span<const uint8_t> bytes) {
  const size_t each = pub.ciphertext_bytes();
  std::vector<secure::Ciphertext> out;
  out.reserve(bytes.size() / each);
  for (size_t at = 0; at < bytes.size(); at += each) {
    TESSEL_ASSIGN_OR_RETURN(secure::Ciphertext c, pub.deserialize(bytes.data() + at));
    out.push_back(std::move(c));
  }
  return out;
}

// ---- the aggregator: adds what the owners send, never holds a private key

Expected<FederatedSummary> aggregate(const TrainConfig& config, dist::ProcessGroup& group) {
  const int owners = group.size() - 1;
  const int64_t rounds = config.steps / config.federated.local_steps;
  FederatedSummary summary;
  summary.aggregator = true;
  summary.rounds = rounds;
  const Clock::time_point start = Clock::now();
  Header header;
  TESSEL_TRY(recv_bytes(group, &header, sizeof header, 1));
  std::vector<uint8_t> modulus(header.modulus_bytes);
  if (!modulus.empty()) TESSEL_TRY(recv_bytes(group, modulus.data(), modulus.size(), 1));
  for (int64_t round = 0; round < rounds; ++round) {
    if (config.federated.secure) {
      mpz_class n;
      mpz_import(n.get_mpz_t(), modulus.size(), 1, 1, 0, 0, modulus.data());
      const secure::PaillierPublicKey pub(n);
      const secure::PackedCodec codec = secure::PackedCodec::for_summands(pub.bits(), owners);
      summary.ciphertexts_per_round = codec.ciphertexts_for(int64_t(header.values));
      std::vector<uint8_t> bytes(size_t(summary.ciphertexts_per_round) * pub.ciphertext_bytes());
      std::vector<secure::Ciphertext> sum;
      for (int owner = 1; owner <= owners; ++owner) {
        Clock::time_point t = Clock::now();
        TESSEL_TRY(recv_bytes(group, bytes.data(), bytes.size(), owner));
        summary.exchange_seconds += since(t);
        t = Clock::now();
        Expected<std::vector<secure::Ciphertext>> c = deserialize(pub, bytes);
        if (!c.ok()) return c.status().with_context("federated: from owner {}", owner);
        if (sum.empty()) {
          sum = std::move(*c);
        } else {
          pub.add_into(sum, *c);
        }
        summary.crypto_seconds += since(t);
      }
      bytes = serialize(pub, sum);
      const Clock::time_point t = Clock::now();
      for (int owner = 1; owner <= owners; ++owner)
        TESSEL_TRY(send_bytes(group, bytes.data(), bytes.size(), owner));
      summary.exchange_seconds += since(t);
    } else {
      std::vector<double> sum(header.values, 0.0), update(header.values);
      for (int owner = 1; owner <= owners; ++owner) {
        TESSEL_TRY(recv_bytes(group, update.data(), update.size() * sizeof(double), owner));
        for (size_t i = 0; i < sum.size(); ++i)
          sum[i] += update[i];
      }
      for (int owner = 1; owner <= owners; ++owner)
        TESSEL_TRY(send_bytes(group, sum.data(), sum.size() * sizeof(double), owner));
    }
  }
  summary.seconds = since(start);
  return summary;
}

// ---- an owner: trains on its shard, sends its encrypted update, applies the decrypted average

// The parameters' values in entry order, without the flat buffers' alignment gaps.
Expected<std::vector<float>> flat_values(nn::FlatParameters& params) {
  std::vector<std::vector<float>> groups;
  for (const nn::FlatParameters::Group& g : params.groups()) {
    if (g.dtype != DType::kF32)
      return unimplemented("federated: parameters of dtype {} (only f32 is averaged)",
                           dtype_name(g.dtype));
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> v, g.values.to_vector<float>());
    groups.push_back(std::move(v));
  }
  std::vector<float> out;
  for (const nn::FlatParameters::Entry& e : params.entries()) {
    const float* begin = groups[e.group].data() + e.offset;
    out.insert(out.end(), begin, begin + e.numel);
  }
  return out;
}

Status set_flat_values(nn::FlatParameters& params, const std::vector<float>& values) {
  size_t at = 0;
  for (const nn::FlatParameters::Entry& e : params.entries()) {
    std::vector<float> part(values.begin() + long(at), values.begin() + long(at + size_t(e.numel)));
    TESSEL_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector<float>(part, {e.numel}));
    TESSEL_ASSIGN_OR_RETURN(Tensor target,
                            params.groups()[e.group].values.slice(0, e.offset, e.offset + e.numel));
    TESSEL_TRY(target.copy_from(host));
    at += size_t(e.numel);
  }
  return ok_status();
}

Expected<FederatedSummary> own(const TrainConfig& config, dist::ProcessGroup& group,
                               TrainerOptions options) {
  const FederatedConfig& f = config.federated;
  const int owners = group.size() - 1;
  options.process_group = nullptr;
  options.data_shard = group.rank() - 1;
  options.data_shards = owners;
  options.evaluate_at_end = false;
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::create(config, options));
  FederatedSummary summary;
  summary.rounds = config.steps / f.local_steps;
  const Clock::time_point start = Clock::now();

  std::optional<secure::PaillierPrivateKey> key;
  if (f.secure) {
    Expected<secure::SecretKey> secret = f.key_file.empty()
                                             ? secure::SecretKey::from_env(f.key_env)
                                             : secure::SecretKey::from_file(f.key_file);
    if (!secret.ok()) return secret.status().with_context("{}: [federated]", config.source);
    const Clock::time_point t = Clock::now();
    key = secure::PaillierPrivateKey::derive(int(f.modulus_bits), *secret);
    summary.crypto_seconds += since(t);
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> weights, flat_values(trainer->parameters()));
  if (group.rank() == 1) {
    std::vector<uint8_t> modulus;
    if (key) {
      const mpz_class& n = key->public_key().n();
      modulus.resize((mpz_sizeinbase(n.get_mpz_t(), 2) + 7) / 8);
      size_t written = 0;
      mpz_export(modulus.data(), &written, 1, 1, 0, 0, n.get_mpz_t());
    }
    const Header header{weights.size(), modulus.size()};
    TESSEL_TRY(send_bytes(group, &header, sizeof header, kAggregator));
    if (!modulus.empty())
      TESSEL_TRY(send_bytes(group, modulus.data(), modulus.size(), kAggregator));
  }
  const secure::PackedCodec codec = secure::PackedCodec::for_summands(int(f.modulus_bits), owners);
  for (int64_t round = 0; round < summary.rounds; ++round) {
    TESSEL_ASSIGN_OR_RETURN(RunSummary local, trainer->run((round + 1) * f.local_steps));
    summary.losses.insert(summary.losses.end(), local.losses.begin(), local.losses.end());
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> now, flat_values(trainer->parameters()));
    std::vector<float> update(now.size());
    for (size_t i = 0; i < now.size(); ++i)
      update[i] = now[i] - weights[i];
    std::vector<double> sum;
    if (key) {
      Clock::time_point t = Clock::now();
      Expected<std::vector<secure::Ciphertext>> c = key->encrypt_values(codec, update);
      if (!c.ok()) return c.status().with_context("federated: owner {}'s update", group.rank());
      std::vector<uint8_t> bytes = serialize(key->public_key(), *c);
      summary.ciphertexts_per_round = int64_t(c->size());
      summary.crypto_seconds += since(t);
      t = Clock::now();
      TESSEL_TRY(send_bytes(group, bytes.data(), bytes.size(), kAggregator));
      TESSEL_TRY(recv_bytes(group, bytes.data(), bytes.size(), kAggregator));
      summary.exchange_seconds += since(t);
      t = Clock::now();
      // Decrypting is the costliest step, and every owner may read the sum: owner k decrypts
      // the k-th of K shares of the ciphertexts, and the owners swap the decoded shares among
      // themselves (the aggregator sees none of them).
      const auto share = [&](int owner) {
        const size_t ciphertexts = bytes.size() / key->public_key().ciphertext_bytes();
        return std::pair{ciphertexts * size_t(owner) / size_t(owners),
                         ciphertexts * size_t(owner + 1) / size_t(owners)};
      };
      const auto share_values = [&](int owner) {
        const auto [begin, end] = share(owner);
        return std::pair{std::min(update.size(), begin * size_t(codec.slots)),
                         std::min(update.size(), end * size_t(codec.slots))};
      };
      const int me = group.rank() - 1;
      const auto [begin, end] = share(me);
      const size_t each = key->public_key().ciphertext_bytes();
      TESSEL_ASSIGN_OR_RETURN(
          std::vector<secure::Ciphertext> mine,
          deserialize(key->public_key(),
                      std::span(bytes).subspan(begin * each, (end - begin) * each)));
      const auto [value_begin, value_end] = share_values(me);
      const std::vector<double> decoded =
          key->decrypt_values(codec, mine, int64_t(value_end - value_begin), owners);
      summary.crypto_seconds += since(t);
      t = Clock::now();
      sum.assign(update.size(), 0.0);
      std::copy(decoded.begin(), decoded.end(), sum.begin() + long(value_begin));
      std::vector<dist::Call> calls;
      for (int other = 0; other < owners; ++other) {
        const auto [other_begin, other_end] = share_values(other);
        if (other == me) continue;
        dist::Call out, in;
        out.kind = dist::CallKind::kSend, out.dtype = dist::DataType::kFloat64;
        out.peer = other + 1, out.send = decoded.data(), out.count = decoded.size();
        in.kind = dist::CallKind::kRecv, in.dtype = dist::DataType::kFloat64;
        in.peer = other + 1, in.recv = sum.data() + other_begin;
        in.count = other_end - other_begin;
        if (out.count > 0) calls.push_back(out);
        if (in.count > 0) calls.push_back(in);
      }
      if (!calls.empty())
        TESSEL_TRY(wait(group.group(std::move(calls)), "exchanging the decrypted shares"));
      summary.exchange_seconds += since(t);
    } else {
      std::vector<double> plain(update.begin(), update.end());
      sum.resize(plain.size());
      const Clock::time_point t = Clock::now();
      TESSEL_TRY(send_bytes(group, plain.data(), plain.size() * sizeof(double), kAggregator));
      TESSEL_TRY(recv_bytes(group, sum.data(), sum.size() * sizeof(double), kAggregator));
      summary.exchange_seconds += since(t);
    }
    for (size_t i = 0; i < weights.size(); ++i)
      weights[i] = float(double(weights[i]) + sum[i] / double(owners));
    TESSEL_TRY(set_flat_values(trainer->parameters(), weights));
  }
  TESSEL_ASSIGN_OR_RETURN(summary.final_eval, trainer->evaluate());
  summary.weights = std::move(weights);
  summary.seconds = since(start);
  return summary;
}

}  // namespace

Expected<FederatedSummary> run_federated(const TrainConfig& config, dist::ProcessGroup& group,
                                         TrainerOptions options) {
  if (!config.federated.enabled)
    return failed_precondition("{}: run_federated needs a [federated] table", config.source);
  if (group.size() < 2)
    return invalid_argument(
        "{}: [federated] needs at least 2 ranks (an aggregator and an owner), "
        "got {}",
        config.source, group.size());
  if (group.rank() == kAggregator) return aggregate(config, group);
  return own(config, group, options);
}

}  // namespace tessel::train
