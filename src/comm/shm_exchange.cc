#include "src/comm/shm_exchange.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "src/comm/agreed.h"
#include "src/comm/transport.h"

namespace shardpoint::internal_comm {

bool WantsShmExchange(const Comm& comm) {
  const char* env = std::getenv("SHARDPOINT_SHM_EXCHANGE");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  if (env != nullptr && std::strcmp(env, "1") == 0) return true;
  return dynamic_cast<const MemoryTransport*>(&comm) == nullptr;
}

struct ShmExchange::Mapping {
  char* addr = nullptr;
  uint64_t size = 0;  // both halves
  uint64_t half = 0;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, size);
  }
};

namespace {

constexpr char kPlace = 'S';   // offset and length in the sender's segment
constexpr char kInline = 'I';  // the payload itself follows

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

std::string Token() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 60; i >= 0; i -= 4) s.push_back(kHex[(v >> i) & 15]);
  return s;
}

std::string NodeName(const ShmOptions& o) {
  if (!o.node_id.empty()) return o.node_id;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

// `size` bytes of file `path` mapped: read-write at a new file (*made: it
// was created, for the caller to unlink; its bytes reserved), else
// read-only at an existing one of that size; null where that fails.
char* MapFile(const std::string& path, uint64_t size, bool* made) {
  const int fd = made ? open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)
                      : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  if (made) *made = true;
  struct stat st;
  const bool ok = made ? posix_fallocate(fd, 0, static_cast<off_t>(size)) == 0
                       : fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == size;
  void* p = MAP_FAILED;
  if (ok) p = mmap(nullptr, size, made ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

// Every rank's flag is "1".
Result<bool> AllSay(Comm& comm, bool mine) {
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(mine ? "1" : "0", &all));
  return std::all_of(all.begin(), all.end(), [](const std::string& s) { return s == "1"; });
}

struct Peer {
  std::string node, pid, token;
};

Result<std::vector<Peer>> GatherPeers(Comm& comm, const ShmOptions& o) {
  std::string mine = NodeName(o) + '\n' + std::to_string(getpid()) + '\n' +
                     (comm.rank() == 0 ? Token() : std::string());
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(mine, &all));
  std::vector<Peer> out;
  for (size_t r = 0; r < all.size(); ++r) {
    const size_t a = all[r].find('\n'), b = a == std::string::npos ? a : all[r].find('\n', a + 1);
    if (b == std::string::npos) {
      return InternalError("shared-memory exchange: rank " + std::to_string(r) +
                           " sent a malformed node id");
    }
    out.push_back(Peer{all[r].substr(0, a), all[r].substr(a + 1, b - a - 1), all[r].substr(b + 1)});
  }
  return out;
}

// A payload's place in the sender's segment, after the status byte.
std::string Place(uint64_t offset, uint64_t len) {
  std::string s(2 + 2 * sizeof(uint64_t), '\0');
  s[1] = kPlace;
  std::memcpy(&s[2], &offset, sizeof(offset));
  std::memcpy(&s[2 + sizeof(offset)], &len, sizeof(len));
  return s;
}

}  // namespace

Result<std::unique_ptr<ShmExchange>> ShmExchange::Open(Comm& comm,
                                                       const std::vector<uint64_t>& capacity,
                                                       const ShmOptions& o) {
  const int n = comm.size(), me = comm.rank();
  std::unique_ptr<ShmExchange> ex(new ShmExchange);
  ex->me_ = me;
  ex->shm_.assign(static_cast<size_t>(n), 0);
  ex->peer_.resize(static_cast<size_t>(n));
  if (static_cast<int>(capacity.size()) != n) {
    return InvalidArgumentError("shared-memory exchange: " + std::to_string(capacity.size()) +
                                " capacities for " + std::to_string(n) + " ranks");
  }
  SP_ASSIGN_OR_RETURN(std::vector<Peer> peers, GatherPeers(comm, o));
  auto pair = [&](int a, int b) {
    return a != b && peers[a].node == peers[b].node &&
           (o.same_process || peers[a].pid != peers[b].pid);
  };
  bool any = false;  // every rank computes the same
  std::vector<char> mine(static_cast<size_t>(n), 0);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      any = any || pair(a, b);
      if (a == me) mine[b] = pair(a, b);
    }
  }
  if (!any) return ex;
  // Room for each payload's status byte and alignment too.
  auto half = [&](int r) {
    const uint64_t room = capacity[r] == 0 ? 0 : capacity[r] + 64 * static_cast<uint64_t>(n);
    return RoundUp(std::min(room, o.max_half), 4096);
  };
  auto path = [&](int r) {
    return o.dir + "/shardpoint-" + peers[0].token + "-" + std::to_string(r);
  };
  const bool has_peer = std::find(mine.begin(), mine.end(), 1) != mine.end();
  bool created = true, own_file = false;
  if (has_peer && half(me) > 0) {
    ex->own_ = std::make_unique<Mapping>();
    ex->own_->half = half(me);
    ex->own_->size = 2 * half(me);
    ex->own_->addr = MapFile(path(me), ex->own_->size, &own_file);
    created = ex->own_->addr != nullptr;
  }
  // The segment goes once every peer had its chance to open it, or on a
  // failure of the Comm.
  struct Unlink {
    std::string path;
    ~Unlink() {
      if (!path.empty()) unlink(path.c_str());
    }
  } unlink_own{own_file ? path(me) : std::string()};
  SP_ASSIGN_OR_RETURN(bool all_created, AllSay(comm, created));
  bool opened = all_created;
  for (int r = 0; r < n && opened; ++r) {
    if (!mine[r] || half(r) == 0) continue;
    auto m = std::make_unique<Mapping>();
    m->half = half(r);
    m->size = 2 * half(r);
    m->addr = MapFile(path(r), m->size, nullptr);
    opened = m->addr != nullptr;
    ex->peer_[r] = std::move(m);
  }
  SP_ASSIGN_OR_RETURN(bool all_opened, AllSay(comm, opened));
  if (!all_opened) {
    ex->own_.reset();
    for (auto& m : ex->peer_) m.reset();
    return ex;
  }
  for (int r = 0; r < n; ++r) ex->shm_[r] = mine[r];
  return ex;
}

ShmExchange::~ShmExchange() = default;

int ShmExchange::shm_peers() const {
  return static_cast<int>(std::count(shm_.begin(), shm_.end(), 1));
}

Status ShmExchange::AllToAllAgreed(Comm& comm, const Status& local, std::vector<std::string>* send,
                                   std::vector<std::string>* recv, Status* unpack,
                                   std::vector<std::string_view>* views) {
  *unpack = OkStatus();
  if (shm_peers() == 0) {
    SP_RETURN_IF_ERROR(internal_comm::AllToAllAgreed(comm, local, send, recv));
    if (views) views->assign(recv->begin(), recv->end());
    return OkStatus();
  }
  const size_t n = shm_.size();
  const uint64_t half = own_ ? own_->half : 0, base = (turn_++ % 2) * half;
  uint64_t used = 0;
  std::vector<std::string> wire(n);
  for (size_t r = 0; r < n; ++r) {
    std::string& p = (*send)[r];
    // The payload goes with its status byte (0), so that a receiver may
    // use it in place (views).
    const uint64_t len = p.size();
    if (shm_[r] && local.ok() && len > 1 && len <= half - used) {
      p[0] = '\0';
      std::memcpy(own_->addr + base + used, p.data(), len);
      wire[r] = Place(base + used, len);
      used = std::min(half, RoundUp(used + len, 64));
      shm_bytes_ += len - 1;
      continue;
    }
    if (shm_[r]) {
      if (p.empty()) p.push_back('\0');
      p.insert(1, 1, kInline);
    }
    wire[r].swap(p);
  }
  const Status agreed = internal_comm::AllToAllAgreed(comm, local, &wire, recv);
  for (size_t r = 0; r < n; ++r) {
    if (wire[r].size() > (*send)[r].size()) wire[r].swap((*send)[r]);  // keep the big buffers
  }
  SP_RETURN_IF_ERROR(agreed);
  if (views) views->assign(recv->begin(), recv->end());
  for (size_t r = 0; r < n; ++r) {
    if (!shm_[r]) continue;
    Status s = Unpack(static_cast<int>(r), &(*recv)[r], views ? &(*views)[r] : nullptr);
    if (!s.ok() && unpack->ok()) *unpack = std::move(s);
  }
  return OkStatus();
}

// Rank r's payload to this rank, from its place or inline, with the status
// byte first: in *got, or where `view` is given, in *view (in the sender's
// segment, or in *got).
Status ShmExchange::Unpack(int r, std::string* got, std::string_view* view) {
  const size_t kPlaceSize = 2 + 2 * sizeof(uint64_t);
  if (got->size() >= 2 && (*got)[1] == kInline) {
    got->erase(1, 1);
    if (view) *view = *got;
    return OkStatus();
  }
  const Mapping* m = peer_[r].get();
  uint64_t offset = 0, len = 0;
  if (got->size() == kPlaceSize && (*got)[1] == kPlace) {
    std::memcpy(&offset, got->data() + 2, sizeof(offset));
    std::memcpy(&len, got->data() + 2 + sizeof(offset), sizeof(len));
  }
  if (got->size() != kPlaceSize || (*got)[1] != kPlace || m == nullptr || m->addr == nullptr ||
      offset > m->size || len > m->size - offset || len == 0 || m->addr[offset] != '\0') {
    return InternalError(
        "shared-memory exchange: rank " + std::to_string(r) + " sent a malformed place (" +
        std::to_string(got->size()) + " bytes; offset " + std::to_string(offset) + ", length " +
        std::to_string(len) + " in a segment of " + std::to_string(m ? m->size : 0) + ")");
  }
  if (view) {
    *view = std::string_view(m->addr + offset, len);
  } else {
    got->assign(m->addr + offset, len);
  }
  return OkStatus();
}

}  // namespace shardpoint::internal_comm
