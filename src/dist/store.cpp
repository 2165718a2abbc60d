// The TCP store: framed messages over non-blocking sockets, every wait a poll() bounded by the call's
// deadline. Frames carry the call and its number, so ranks that make different calls are told so.
#include "dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/ranges.h>

#include "base/error.h"

namespace fp8kit::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x53384B46;  // "F8KS"
constexpr uint8_t kHello = 1, kData = 2, kAbort = 3;

// Every process of a job runs the same build on the same kind of host: fields in host order.
struct Header {
  uint32_t magic;
  uint8_t kind;
  uint8_t op;
  uint16_t reserved;
  uint32_t sequence;
  uint32_t reserved2;
  uint64_t length;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

std::string seconds(std::chrono::milliseconds t) {
  return fmt::format("{:g} s", static_cast<double>(t.count()) / 1000.0);
}

void make_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::span<const std::byte> bytes_of(const auto& value) { return std::as_bytes(std::span(&value, 1)); }

// allgather's reply: the count, each blob's length, then the blobs.
Store::Blob pack(const std::vector<Store::Blob>& blobs) {
  Store::Blob out;
  auto put = [&](std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); };
  put(bytes_of(static_cast<uint64_t>(blobs.size())));
  for (const Store::Blob& b : blobs) put(bytes_of(static_cast<uint64_t>(b.size())));
  for (const Store::Blob& b : blobs) put(b);
  return out;
}

std::vector<Store::Blob> unpack(const Store::Blob& packed) {
  size_t at = 0;
  auto take = [&]() {
    uint64_t v = 0;
    FP8KIT_CHECK(at + sizeof v <= packed.size(), "store: a truncated allgather reply from rank 0");
    std::memcpy(&v, packed.data() + at, sizeof v);
    at += sizeof v;
    return v;
  };
  std::vector<Store::Blob> blobs(take());
  std::vector<uint64_t> sizes(blobs.size());
  for (uint64_t& s : sizes) s = take();
  for (size_t i = 0; i < blobs.size(); ++i) {
    FP8KIT_CHECK(at + sizes[i] <= packed.size(), "store: a truncated allgather reply from rank 0");
    blobs[i].assign(packed.begin() + at, packed.begin() + at + sizes[i]);
    at += sizes[i];
  }
  return blobs;
}

}  // namespace

enum class Store::Op : uint8_t { Connect, Broadcast, Gather, Allgather, Barrier };

namespace {
const char* name(uint8_t op) {
  static constexpr const char* names[] = {"connect", "broadcast", "gather", "allgather", "barrier"};
  return op < std::size(names) ? names[op] : "an unknown call";
}
}  // namespace

struct Store::Peer {
  int fd = -1;
  int rank = 0;
  Peer(int fd, int rank) : fd(fd), rank(rank) {}
  Peer(Peer&& other) noexcept : fd(std::exchange(other.fd, -1)), rank(other.rank) {}
  Peer& operator=(Peer&& other) noexcept {
    std::swap(fd, other.fd);
    std::swap(rank, other.rank);
    return *this;
  }
  ~Peer() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

template <typename F>
auto Store::collective(Op op, F&& body) {
  if (!failure_.empty()) fail("{}", failure_);
  op_ = op;
  ++sequence_;
  const auto grace = std::max<std::chrono::milliseconds>(std::chrono::seconds(1), options_.timeout / 10);
  deadline_ = Clock::now() + options_.timeout + (rank_ == 0 ? std::chrono::milliseconds(0) : grace);
  try {
    return body();
  } catch (const Error& e) {
    fail_all(e.what());
    throw;
  }
}

Store::Store(const Rendezvous& r, StoreOptions options)
    : rank_(r.rank), world_size_(r.world_size), options_(options) {
  if (world_size_ == 1) return;
  const auto start = Clock::now();
  collective(Op::Connect, [&] {
    --sequence_;  // the connection is call 0
    if (rank_ == 0) accept_ranks(r.master_port);
    else join(r, start + options_.timeout);
    return 0;
  });
}

void Store::accept_ranks(int port) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  FP8KIT_CHECK(listener >= 0, "store: cannot make a socket: {}", std::strerror(errno));
  Peer listening(listener, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  FP8KIT_CHECK(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                   ::listen(listener, world_size_) == 0,
               "rank 0 cannot listen on port {}: {}: choose another MASTER_PORT", port,
               std::strerror(errno));
  make_nonblocking(listener);
  std::vector<bool> arrived(world_size_, false);
  arrived[0] = true;
  for (int connected = 1; connected < world_size_;) {
    pollfd p{listener, POLLIN, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline_));
    if (ready == 0) {
      std::vector<int> missing;
      for (int i = 1; i < world_size_; ++i)
        if (!arrived[i]) missing.push_back(i);
      fail("rank 0 waited {} on port {}: rank(s) {} did not connect (not started, or another MASTER_ADDR or "
           "MASTER_PORT)", seconds(options_.timeout), port, fmt::join(missing, ", "));
    }
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) continue;  // EINTR, or a connection that went away before accept
    make_nonblocking(fd);
    Peer peer(fd, -1);
    Peer* p0 = &peer;
    const Blob hello = receive({&p0, 1}).at(0);
    int32_t who[2] = {-1, -1};  // rank, world size
    if (hello.size() == sizeof who) std::memcpy(who, hello.data(), sizeof who);
    std::string problem;
    if (who[1] != world_size_) {
      problem = fmt::format("a process of a job of {} (rank {}) connected to rank 0's port {}, whose job has {} "
                            "processes: every rank needs the same WORLD_SIZE", who[1], who[0], port,
                            world_size_);
    } else if (who[0] < 1 || who[0] >= world_size_ || arrived[who[0]]) {
      problem = fmt::format("two processes claim rank {}: every rank needs its own RANK", who[0]);
    }
    if (!problem.empty()) {
      send(peer, kAbort, std::as_bytes(std::span(problem)));
      fail("{}", problem);
    }
    arrived[who[0]] = true;
    peer.rank = who[0];
    peers_.push_back(std::move(peer));
    ++connected;
  }
  std::ranges::sort(peers_, {}, &Peer::rank);
  for (Peer& peer : peers_) send(peer, kData, {});
}

// The other ranks: connect (rank 0 may start later: retry), say who they are, wait for the welcome.
void Store::join(const Rendezvous& r, std::chrono::steady_clock::time_point connect_deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = ::getaddrinfo(r.master_addr.c_str(), std::to_string(r.master_port).c_str(), &hints, &found);
  FP8KIT_CHECK(status == 0, "cannot resolve MASTER_ADDR '{}': {}", r.master_addr, ::gai_strerror(status));
  const sockaddr_in target = *reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  std::string last_error;
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    FP8KIT_CHECK(fd >= 0, "store: cannot make a socket: {}", std::strerror(errno));
    Peer peer(fd, 0);
    make_nonblocking(fd);
    int error = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        socklen_t length = sizeof error;
        error = ::poll(&p, 1, std::min(remaining_ms(connect_deadline), 1000)) == 1 &&
                        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0
                    ? error
                    : ETIMEDOUT;
      }
    }
    if (error == 0) {
      peers_.push_back(std::move(peer));
      break;
    }
    last_error = std::strerror(error);
    if (remaining_ms(connect_deadline) == 0)
      fail("rank {} could not reach rank 0 at {}:{} within {} ({}): is rank 0 running, with the same MASTER_ADDR "
           "and MASTER_PORT?", rank_, r.master_addr, r.master_port, seconds(options_.timeout), last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(remaining_ms(connect_deadline), 100)));
  }
  const int32_t who[2] = {rank_, world_size_};
  send(peers_[0], kHello, bytes_of(who));
  Peer* p0 = &peers_[0];
  receive({&p0, 1});
}

Store::~Store() = default;

void Store::fail_all(const std::string& message) {
  failure_ = message;
  // Tell the ranks still there why (rank 0 relays another rank's report to the rest), so that every
  // rank fails with this message rather than "rank 0 left".
  deadline_ = Clock::now() + std::chrono::seconds(1);
  std::vector<pollfd> open;
  for (Peer& peer : peers_) {
    if (peer.fd < 0) continue;
    try {
      send(peer, kAbort, std::as_bytes(std::span(message)));
    } catch (const Error&) {
    }
    ::shutdown(peer.fd, SHUT_WR);
    open.push_back({peer.fd, POLLIN, 0});
  }
  // Closing a socket with unread data resets the connection, and a reset can drop the report just
  // sent: read what the peers still send until they close (they do once they have the report), for
  // at most the second.
  while (!open.empty() && remaining_ms(deadline_) > 0 &&
         ::poll(open.data(), open.size(), remaining_ms(deadline_)) > 0) {
    std::erase_if(open, [](const pollfd& p) {
      if (p.revents == 0) return false;
      std::byte scrap[4096];
      const ssize_t n = ::recv(p.fd, scrap, sizeof scrap, MSG_DONTWAIT);
      return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
    });
  }
  for (Peer& peer : peers_) peer.close();
}

void Store::abort(const std::string& message) {
  fail_all(message);
  throw Error(message);
}

std::string Store::poll_failure() {
  if (!failure_.empty() || world_size_ == 1) return failure_;
  std::vector<pollfd> fds;
  for (const Peer& peer : peers_) fds.push_back({peer.fd, POLLIN, 0});
  if (::poll(fds.data(), fds.size(), 0) <= 0) return "";
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    // Peek: a frame of the next call stays where that call will read it.
    Header header{};
    const ssize_t n = ::recv(fds[i].fd, &header, sizeof header, MSG_PEEK | MSG_DONTWAIT);
    std::string message;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      message = fmt::format("rank {} left (its connection closed: the process ended)", peers_[i].rank);
    } else if (n == sizeof header && header.magic == kMagic && header.kind == kAbort) {
      std::vector<char> frame(sizeof header + header.length);
      if (::recv(fds[i].fd, frame.data(), frame.size(), MSG_PEEK | MSG_DONTWAIT) != ssize_t(frame.size())) continue;
      message.assign(frame.begin() + sizeof header, frame.end());
      if (rank_ == 0) message = fmt::format("rank {}: {}", peers_[i].rank, message);
    }
    if (!message.empty()) {
      fail_all(message);
      return message;
    }
  }
  return "";
}

void Store::send(Peer& peer, uint8_t kind, std::span<const std::byte> data) {
  const Header header{kMagic, kind, static_cast<uint8_t>(op_), 0, sequence_, 0, data.size()};
  for (std::span<const std::byte> part : {bytes_of(header), data}) {
    while (!part.empty()) {
      const ssize_t n = ::send(peer.fd, part.data(), part.size(), MSG_NOSIGNAL);
      if (n > 0) {
        part = part.subspan(static_cast<size_t>(n));
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{peer.fd, POLLOUT, 0};
        if (::poll(&p, 1, remaining_ms(deadline_)) == 0)
          fail("{} #{} timed out after {} on rank {}: rank {} did not take its data", name(uint8_t(op_)), sequence_,
               seconds(options_.timeout), rank_, peer.rank);
      } else if (errno != EINTR) {
        fail("rank {} left during {} #{} (its connection closed: {}): see its own output for why", peer.rank,
             name(uint8_t(op_)), sequence_, std::strerror(errno));
      }
    }
  }
}

std::vector<Store::Blob> Store::receive(std::span<Peer*> peers) {
  struct Incoming {
    Header header{};
    size_t got = 0;  // of the header, then of the payload
    bool in_payload = false;
    bool done = false;
    Blob payload;
  };
  std::vector<Incoming> in(peers.size());
  auto where = [&] { return fmt::format("{} #{}", name(uint8_t(op_)), sequence_); };
  for (size_t waiting = peers.size(); waiting > 0;) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < peers.size(); ++i) {
      if (in[i].done) continue;
      fds.push_back({peers[i]->fd, POLLIN, 0});
      which.push_back(i);
    }
    const int ready = ::poll(fds.data(), fds.size(), remaining_ms(deadline_));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      if (rank_ != 0)
        fail("{} timed out after {} on rank {}: no answer from rank 0", where(), seconds(options_.timeout), rank_);
      std::vector<int> missing;
      for (size_t i : which) missing.push_back(peers[i]->rank);
      fail("{} timed out after {} on rank 0: rank(s) {} did not arrive (slow, hung, or stopped before this call)",
           where(), seconds(options_.timeout), fmt::join(missing, ", "));
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Incoming& m = in[which[k]];
      const Peer& peer = *peers[which[k]];
      const std::string who = peer.rank >= 0 ? fmt::format("rank {}", peer.rank) : "a connecting process";
      // Read only up to this frame's end: the next call's frame may follow it.
      while (!m.done) {
        std::byte* to = m.in_payload ? m.payload.data() + m.got : reinterpret_cast<std::byte*>(&m.header) + m.got;
        const size_t want = (m.in_payload ? m.payload.size() : sizeof(Header)) - m.got;
        const ssize_t n = ::recv(peer.fd, to, want, 0);
        if (n == 0) fail("{} left during {} (its connection closed: the process ended)", who, where());
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          if (errno == EINTR) continue;
          fail("{} left during {} (its connection failed: {})", who, where(), std::strerror(errno));
        }
        m.got += static_cast<size_t>(n);
        if (!m.in_payload && m.got == sizeof(Header)) {
          FP8KIT_CHECK(m.header.magic == kMagic, "{} sent something that is not fp8kit's store protocol during {}: "
                       "is another program using MASTER_PORT?", who, where());
          m.payload.resize(m.header.length);
          m.in_payload = true;
          m.got = 0;
        }
        if (m.in_payload && m.got == m.payload.size()) {
          m.done = true;
          --waiting;
          const Header& h = m.header;
          if (h.kind == kAbort) {
            const std::string report(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
            if (rank_ == 0) fail("rank {}: {}", peer.rank, report);
            fail("{}", report);
          }
          FP8KIT_CHECK(h.op == uint8_t(op_) && h.sequence == sequence_,
                       "{} is in {} #{} where rank {} is in {}: every rank must make the same store calls in the same "
                       "order", who, name(h.op), h.sequence, rank_, where());
        }
      }
    }
  }
  std::vector<Blob> out;
  for (Incoming& m : in) out.push_back(std::move(m.payload));
  return out;
}

Store::Blob Store::broadcast(std::span<const std::byte> data) {
  if (world_size_ == 1) return Blob(data.begin(), data.end());
  return collective(Op::Broadcast, [&] {
    if (rank_ == 0) {
      for (Peer& peer : peers_) send(peer, kData, data);
      return Blob(data.begin(), data.end());
    }
    Peer* root = &peers_[0];
    return std::move(receive({&root, 1})[0]);
  });
}

std::vector<Store::Blob> Store::gather(std::span<const std::byte> data) {
  if (world_size_ == 1) return {Blob(data.begin(), data.end())};
  return collective(Op::Gather, [&] {
    std::vector<Blob> all;
    if (rank_ != 0) {
      send(peers_[0], kData, data);
      return all;
    }
    std::vector<Peer*> others;
    for (Peer& peer : peers_) others.push_back(&peer);
    all = receive(others);
    all.insert(all.begin(), Blob(data.begin(), data.end()));
    return all;
  });
}

std::vector<Store::Blob> Store::allgather(std::span<const std::byte> data) {
  if (world_size_ == 1) return {Blob(data.begin(), data.end())};
  return collective(Op::Allgather, [&] {
    if (rank_ != 0) {
      send(peers_[0], kData, data);
      Peer* root = &peers_[0];
      return unpack(receive({&root, 1})[0]);
    }
    std::vector<Peer*> others;
    for (Peer& peer : peers_) others.push_back(&peer);
    std::vector<Blob> all = receive(others);
    all.insert(all.begin(), Blob(data.begin(), data.end()));
    const Blob packed = pack(all);
    for (Peer& peer : peers_) send(peer, kData, packed);
    return all;
  });
}

void Store::barrier() {
  if (world_size_ == 1) return;
  collective(Op::Barrier, [&] {
    std::vector<Peer*> others;
    for (Peer& peer : peers_) others.push_back(&peer);
    if (rank_ != 0) send(peers_[0], kData, {});
    receive(others);  // rank 0: everyone's arrival; the others: rank 0's release
    if (rank_ == 0)
      for (Peer& peer : peers_) send(peer, kData, {});
    return 0;
  });
}

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  FP8KIT_CHECK(fd >= 0, "cannot make a socket: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0;
  const int error = errno;
  ::close(fd);
  FP8KIT_CHECK(ok, "cannot find a free TCP port: {}", std::strerror(error));
  return ntohs(addr.sin_port);
}

}  // namespace fp8kit::dist
