// Where ranks learn who they are: TESSEL_*, torchrun's and Open MPI's variables (with their
// precedence and errors), and the unique id's encoding.
#include "dist/rendezvous.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace tessel::dist {
namespace {

Expected<RankEnv> from(std::map<std::string, std::string> vars) {
  return rank_env_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(RankEnv, TesselVariables) {
  auto env = from({{"TESSEL_RANK", "2"},
                   {"TESSEL_WORLD_SIZE", "4"},
                   {"TESSEL_LOCAL_RANK", "0"},
                   {"TESSEL_MASTER_ADDR", "10.0.0.1"},
                   {"TESSEL_MASTER_PORT", "29500"},
                   {"TESSEL_USE_AGENT_STORE", "1"}});
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_TRUE(env->agent_store);
  EXPECT_EQ(env->source, "TESSEL_*");
}

TEST(RankEnv, TorchrunVariablesAndTesselTakesPrecedence) {
  auto env =
      from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->local_rank, 1);  // defaults to the rank
  EXPECT_EQ(env->master_addr, "node0");
  EXPECT_FALSE(env->agent_store);
  auto both =
      from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"TESSEL_RANK", "0"}, {"TESSEL_WORLD_SIZE", "3"}});
  EXPECT_EQ(both->source, "TESSEL_*");
  EXPECT_EQ(both->world_size, 3);
}

TEST(RankEnv, OpenMpiVariablesTakeThePortFromTesselOrTorchrun) {
  auto env = from({{"OMPI_COMM_WORLD_RANK", "3"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"MASTER_PORT", "4000"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->source, "OpenMPI");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_port, 4000);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  auto no_port = from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(no_port->master_port, 0);  // fine for the mpi backend, which needs no store
}

TEST(RankEnv, SlurmVariables) {
  auto env = from({{"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "1"},
                   {"TESSEL_MASTER_PORT", "29400"},
                   {"TESSEL_MASTER_ADDR", "node3"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->source, "Slurm");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "node3");
}

TEST(RankEnv, ErrorsNameTheVariable) {
  EXPECT_EQ(from({}).status().code(), Code::kNotFound);
  auto half = from({{"TESSEL_RANK", "0"}});
  EXPECT_NE(half.status().message().find("TESSEL_WORLD_SIZE is not"), std::string::npos);
  auto beyond = from({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(beyond.status().message().find("RANK=4 is not below WORLD_SIZE=4"), std::string::npos)
      << beyond.status().message();
  auto garbage = from({{"RANK", "x"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(garbage.status().message().find("RANK='x'"), std::string::npos);
  auto port = from({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}});
  EXPECT_EQ(port.status().code(), Code::kInvalidArgument);
}

TEST(UniqueId, RoundTripsAndRejectsGarbage) {
  UniqueId id{"192.168.1.20", 40123, "0123456789abcdef0123456789abcdef"};
  char bytes[kUniqueIdBytes];
  encode_unique_id(id, bytes);
  auto back = decode_unique_id(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->host, id.host);
  EXPECT_EQ(back->port, id.port);
  EXPECT_EQ(back->key, id.key);
  char zero[kUniqueIdBytes] = {};
  EXPECT_EQ(decode_unique_id(zero).status().code(), Code::kInvalidArgument);
  EXPECT_NE(random_key(), random_key());
  EXPECT_EQ(random_key().size(), 32u);
}

}  // namespace
}  // namespace tessel::dist
