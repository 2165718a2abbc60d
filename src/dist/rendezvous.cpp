// Reading a job's rank, world size and rank 0's address from the launcher's environment variables.
#include "dist/rendezvous.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "base/error.h"

namespace fp8kit::dist {
namespace {

// The launcher's variable names, one family per launcher.
struct Family {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};
constexpr Family kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr Family kSlurm{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};
constexpr Family kMpi{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                      "OMPI_COMM_WORLD_LOCAL_SIZE"};

std::optional<int> integer(const EnvLookup& lookup, const char* name) {
  const char* text = lookup(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view s(text);
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  FP8KIT_CHECK(ec == std::errc() && end == s.data() + s.size() && value >= 0,
               "{}='{}' is not a non-negative whole number: fix the launcher's environment", name, s);
  return value;
}

// SLURM_TASKS_PER_NODE reads "4(x2),3": this node's count is not known from it alone; the first
// count is right for the usual uniform job.
std::optional<int> leading_count(const char* text) {
  if (text == nullptr) return std::nullopt;
  int value = 0;
  const std::string_view s(text);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || value <= 0) return std::nullopt;
  return value;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  const size_t comma = nodelist.find(',');
  const size_t bracket = nodelist.find('[');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return nodelist.substr(0, comma);
  // prefix[03-04,07] -> prefix03: the first number of the range list, with its zero padding.
  const size_t end = nodelist.find_first_of(",-]", bracket + 1);
  FP8KIT_CHECK(end != std::string::npos && end > bracket + 1,
               "SLURM_JOB_NODELIST='{}' has no host in its brackets: set MASTER_ADDR to rank 0's host", nodelist);
  return nodelist.substr(0, bracket) + nodelist.substr(bracket + 1, end - bracket - 1);
}

Rendezvous read_rendezvous(const EnvLookup& lookup) {
  Rendezvous r;
  const Family* family = nullptr;
  for (const Family* f : {&kTorchrun, &kSlurm, &kMpi}) {
    if (lookup(f->rank) != nullptr || lookup(f->world_size) != nullptr) {
      family = f;
      break;
    }
  }
  if (family == nullptr) return r;
  r.source = family->source;
  // fp8kit's own launcher (launch.h) sets torchrun's variables and says so.
  if (const char* launcher = lookup("FP8KIT_LAUNCHER"); family == &kTorchrun && launcher != nullptr && *launcher)
    r.source = launcher;
  const std::optional<int> rank = integer(lookup, family->rank);
  const std::optional<int> world_size = integer(lookup, family->world_size);
  FP8KIT_CHECK(rank && world_size, "{} is set but {} is not: the {} environment is incomplete",
               rank ? family->rank : family->world_size, rank ? family->world_size : family->rank, r.source);
  FP8KIT_CHECK(*world_size >= 1, "{}={}: the world size must be at least 1", family->world_size, *world_size);
  FP8KIT_CHECK(*rank < *world_size, "{}={} is not below {}={}: ranks run from 0 to the world size - 1",
               family->rank, *rank, family->world_size, *world_size);
  r.rank = *rank;
  r.world_size = *world_size;
  r.local_rank = integer(lookup, family->local_rank).value_or(*world_size == 1 ? 0 : *rank);
  std::optional<int> local_world_size = integer(lookup, family->local_world_size);
  if (!local_world_size && family == &kSlurm) local_world_size = leading_count(lookup("SLURM_TASKS_PER_NODE"));
  r.local_world_size = local_world_size.value_or(*world_size);
  FP8KIT_CHECK(r.local_rank < r.local_world_size, "{}={} is not below the {} processes on this node ({})",
               family->local_rank, r.local_rank, r.local_world_size, family->local_world_size);

  if (const char* addr = lookup("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    r.master_addr = addr;
  } else if (const char* nodes = lookup("SLURM_JOB_NODELIST");
             family == &kSlurm && nodes != nullptr && *nodes != '\0') {
    r.master_addr = first_slurm_host(nodes);
  }
  FP8KIT_CHECK(r.world_size == 1 || !r.master_addr.empty(),
               "MASTER_ADDR is not set: a job of {} processes ({}) needs rank 0's host name or address in it",
               r.world_size, r.source);
  r.master_port = integer(lookup, "MASTER_PORT").value_or(kDefaultMasterPort);
  // torchrun's agent hosts a TCP store of its own at MASTER_PORT, and says so in its workers'
  // environment: rank 0's store listens on the next port.
  if (const char* agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
      family == &kTorchrun && agent != nullptr && std::string_view(agent) == "True")
    ++r.master_port;
  FP8KIT_CHECK(r.master_port >= 1 && r.master_port <= 65535, "MASTER_PORT={} is not a TCP port (1 to 65535)",
               r.master_port);
  return r;
}

Rendezvous read_rendezvous() {
  return read_rendezvous([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace fp8kit::dist
