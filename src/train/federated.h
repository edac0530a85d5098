// Federated training with secure aggregation (the NVIDIA FLARE / FATE pattern): each data owner
// trains on its own data for some local steps, encrypts its model update under Paillier
// (secure/paillier.h), and an aggregator that never holds the private key multiplies the
// ciphertexts, so the owners decrypt only the sum of the updates: the federated average.
//
//   [federated]  local_steps = 50   secure = true   key_file = "owners.key" (or key_env = "...")
//                modulus_bits = 2048   backend = "shm"
//   tessel launch -n 3 tessel train fed.toml      # rank 0 aggregates, ranks 1 and 2 own data
//
// Roles: rank 0 is the aggregator (it builds no model and reads no data); ranks 1..K are the
// owners, owner k reading shard k-1 of K of every global batch (batch_size rows each), as data
// parallel ranks do. Every owner derives the same Paillier key from the owners' shared secret
// (the key file, which the aggregator does not get); owner 1 sends the public key n and the
// number of values to the aggregator once. A round: owners snapshot their weights, train
// local_steps, send Enc(weights - snapshot) (packed with just the headroom a sum of K needs: 62
// values per 2048-bit ciphertext for 2 owners, 60 for 4); the aggregator adds them under
// encryption and sends the sum back; owner k decrypts the k-th of K shares of it and the owners
// swap their decoded shares directly (decryption is the costliest step; the aggregator sees no
// plaintext); each sets weights = snapshot + sum / K.
// With secure = false the same exchange carries the updates in the clear (float64): the plaintext
// federated baseline. steps must be a multiple of local_steps. Optimizer state stays with each
// owner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "train/trainer.h"

namespace tessel::train {

struct FederatedSummary {
  bool aggregator = false;
  int64_t rounds = 0;
  std::vector<double> losses;  // this owner's local training losses
  Evaluation final_eval;       // owners: the global model after the last round
  std::vector<float> weights;  // owners: the global model's flat f32 values
  double seconds = 0.0;
  double crypto_seconds = 0.0;    // owners: encrypting and decrypting; aggregator: adding
  double exchange_seconds = 0.0;  // waiting for sends and receives
  int64_t ciphertexts_per_round = 0;
};

// Runs this rank's role. `config` must have a [federated] table; `group` has K + 1 ranks.
Expected<FederatedSummary> run_federated(const TrainConfig& config, dist::ProcessGroup& group,
                                         TrainerOptions options = {});

}  // namespace tessel::train
