// Reading the rank, world size and rank 0's address from torchrun's, Slurm's and Open MPI's variables.
#include "dist/rendezvous.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/error_of.h"

namespace fp8kit::dist {
namespace {

using testing::error_of;
using Vars = std::map<std::string, std::string>;

Rendezvous read(const Vars& vars) {
  return read_rendezvous([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Rendezvous, NothingSetIsOneProcess) {
  const Rendezvous r = read({{"PATH", "/bin"}});
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.local_rank, 0);
  EXPECT_EQ(r.source, "none");
  EXPECT_TRUE(r.master_addr.empty());
}

TEST(Rendezvous, Torchrun) {
  const Rendezvous r = read({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                             {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(r.source, "torchrun");
  EXPECT_EQ(read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"},
                  {"FP8KIT_LAUNCHER", "fp8kit --procs"}}).source, "fp8kit --procs");
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.world_size, 8);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.local_world_size, 4);
  EXPECT_EQ(r.master_addr, "node7");
  EXPECT_EQ(r.master_port, 1234);
}

TEST(Rendezvous, UnderTorchrunsAgentStoreTheNextPort) {
  Vars vars = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"},
               {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  EXPECT_EQ(read(vars).master_port, 1235);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_EQ(read(vars).master_port, 1234);
}

TEST(Rendezvous, SlurmTakesRankZerosHostFromTheNodeList) {
  const Rendezvous r = read({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                             {"SLURM_TASKS_PER_NODE", "2(x2)"}, {"SLURM_JOB_NODELIST", "gpu[03-04]"}});
  EXPECT_EQ(r.source, "slurm");
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.local_world_size, 2);
  EXPECT_EQ(r.master_addr, "gpu03");
  EXPECT_EQ(r.master_port, kDefaultMasterPort);
  // MASTER_ADDR, when set, wins over the node list.
  EXPECT_EQ(read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a,b"},
                  {"MASTER_ADDR", "10.0.0.1"}}).master_addr,
            "10.0.0.1");
}

TEST(Rendezvous, OpenMpi) {
  const Rendezvous r = read({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                             {"MASTER_ADDR", "head"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(r.source, "mpirun");
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world_size, 3);
  EXPECT_EQ(r.local_rank, 0);
  EXPECT_EQ(r.master_port, 4000);
}

TEST(Rendezvous, TorchrunsVariablesWinOverTheLaunchersAround) {
  // torchrun inside an srun allocation: the processes torchrun started are the job.
  const Rendezvous r = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"SLURM_PROCID", "0"},
                             {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(r.source, "torchrun");
  EXPECT_EQ(r.world_size, 2);
}

TEST(Rendezvous, BadValuesAreOneLineErrorsNamingTheVariable) {
  EXPECT_EQ(error_of([] { read({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "x"}}); }),
            "RANK=4 is not below WORLD_SIZE=4: ranks run from 0 to the world size - 1");
  EXPECT_EQ(error_of([] { read({{"RANK", "1"}, {"WORLD_SIZE", "2"}}); }),
            "MASTER_ADDR is not set: a job of 2 processes (torchrun) needs rank 0's host name or address in it");
  EXPECT_EQ(error_of([] {
              read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "70000"}});
            }),
            "MASTER_PORT=70000 is not a TCP port (1 to 65535)");
  EXPECT_EQ(error_of([] { read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "http"}}); }),
            "MASTER_PORT='http' is not a non-negative whole number: fix the launcher's environment");
  EXPECT_EQ(error_of([] { read({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}); }),
            "RANK='-1' is not a non-negative whole number: fix the launcher's environment");
  EXPECT_EQ(error_of([] { read({{"WORLD_SIZE", "2"}}); }),
            "WORLD_SIZE is set but RANK is not: the torchrun environment is incomplete");
  EXPECT_EQ(error_of([] { read({{"RANK", "0"}, {"WORLD_SIZE", "0"}}); }),
            "WORLD_SIZE=0: the world size must be at least 1");
  EXPECT_EQ(error_of([] { read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "x"}}); }),
            "LOCAL_RANK=2 is not below the 2 processes on this node (LOCAL_WORLD_SIZE)");
}

TEST(Rendezvous, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("gpu[03-04,07],cpu1"), "gpu03");
  EXPECT_EQ(first_slurm_host("gpu[7,9]"), "gpu7");
  EXPECT_EQ(first_slurm_host("a1,gpu[1-2]"), "a1");
  EXPECT_NE(error_of([] { first_slurm_host("gpu[]"); }).find("set MASTER_ADDR"), std::string::npos);
}

}  // namespace
}  // namespace fp8kit::dist
