// Who this process is in a data-parallel job (rank, world size, local rank) and where rank 0 listens,
// read from the variables that torchrun, Slurm's srun and Open MPI's mpirun set, so the same binary
// runs under any of them (or alone: world size 1).
#pragma once

#include <functional>
#include <string>

namespace fp8kit::dist {

struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // the GPU this process drives on its node
  int local_world_size = 1;  // processes on this node
  std::string master_addr;   // rank 0's host; empty at world size 1
  int master_port = 0;
  std::string source = "none";  // "torchrun", "slurm", "mpirun", "fp8kit --procs" (launch.h), "none"
};

// The port rank 0 listens on when no MASTER_PORT is set (torchrun's default).
inline constexpr int kDefaultMasterPort = 29500;

// Looks a variable up: its value, or nullptr when unset (std::getenv's contract).
using EnvLookup = std::function<const char*(const char*)>;

// From, in this order of precedence:
//   torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (or
//             SLURM_TASKS_PER_NODE's first count); MASTER_ADDR, else the first host of
//             SLURM_JOB_NODELIST ("gpu[03-04,07]" -> "gpu03")
//   Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; MASTER_ADDR
// MASTER_PORT defaults to kDefaultMasterPort; under torchrun with TORCHELASTIC_USE_AGENT_STORE=True
// (its agent's own store holds MASTER_PORT) the port is MASTER_PORT + 1. None set: world size 1. Throws fp8kit::Error naming the
// variable on a value that is not a number, a rank outside [0, world size), a missing MASTER_ADDR at
// world size > 1, or a port outside [1, 65535].
Rendezvous read_rendezvous(const EnvLookup& lookup);
// From this process's environment.
Rendezvous read_rendezvous();

// The first host name of a Slurm node list: "node1,node2" -> "node1", "gpu[03-04,07],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace fp8kit::dist
