// The nccl backend of dist::Communicator (built when CMake finds NCCL: FP8KIT_HAVE_NCCL).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace fp8kit::dist {

// Selects GPU r.local_rank, connects the store, shares rank 0's NCCL unique id through it, and
// initializes the NCCL communicator (non-blocking, so that a rank that never joins ends in a timeout).
std::unique_ptr<Communicator> make_nccl_communicator(const Rendezvous& r, CommunicatorOptions options);

}  // namespace fp8kit::dist
