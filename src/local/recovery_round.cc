#include "src/local/recovery_round.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "src/comm/thread_comm.h"
#include "src/format/checksum.h"
#include "src/source/manifest_read.h"

namespace shardpoint::internal_local {

using internal_format::Checksum64;
using internal_format::Manifest;

namespace {

// Received units placed per call: a batch is still in the cache (1 MiB L2,
// 32 MiB L3 here) when it is copied out.
constexpr uint64_t kPlaceBatchBytes = uint64_t{4} << 20;

// Unit u of the node's copy in place where the copy is mapped (unchecked,
// its pages mapped: Prefault); null where it is not; DataLoss where the
// mapped file ends before the unit does (reading there would raise SIGBUS).
Result<const char*> MappedUnit(const Recovery& x, const Unit& u) {
  if (u.file >= x.maps.size() || !x.maps[u.file]) return static_cast<const char*>(nullptr);
  const internal_io::MappedFile& f = *x.maps[u.file];
  if (u.offset > f.size() || u.nbytes > f.size() - u.offset) {
    return DataLossError(UnitName(x.m, u) + ": the file ends at byte " + std::to_string(f.size()));
  }
  f.Prefault(u.offset, u.nbytes);
  return f.bytes().data() + u.offset;
}

// A message of the exchange: per unit, a header (u32 unit, u32 source, u8
// ok), then the unit's bytes when ok.
constexpr size_t kHeader = 9;

void PutHeader(Recovery& x, int r, uint32_t unit, int source, bool ok) {
  char* h = x.headers.Take(kHeader);
  const uint32_t src = static_cast<uint32_t>(source);
  std::memcpy(h, &unit, 4);
  std::memcpy(h + 4, &src, 4);
  h[8] = ok ? 1 : 0;
  x.out[r].emplace_back(h, kHeader);
}

// A message read record by record across its pieces: one piece per header
// and per unit's bytes (thread ranks), or the whole message in one.
class MessageReader {
 public:
  explicit MessageReader(const std::vector<std::string_view>& pieces) : p_(pieces) {}
  bool done() {
    Skip();
    return i_ == p_.size();
  }
  // The next n bytes, within one piece; false where that piece has fewer.
  bool Take(size_t n, std::string_view* out) {
    if (n == 0) {
      *out = {};
      return true;
    }
    Skip();
    if (i_ == p_.size() || p_[i_].size() - at_ < n) return false;
    *out = p_[i_].substr(at_, n);
    at_ += n;
    return true;
  }

 private:
  void Skip() {
    while (i_ < p_.size() && at_ == p_[i_].size()) ++i_, at_ = 0;
  }
  const std::vector<std::string_view>& p_;
  size_t i_ = 0, at_ = 0;
};

}  // namespace

bool SentFromMapping(const Recovery& x, const Transfer& tr) {
  return tr.source != kPersistent && x.maps_of[tr.server][x.ut.units[tr.unit].file];
}

// Step 4, one transfer served by this rank: adds it to the round's messages,
// keeps what this rank itself receives, notes a bad copy. The unit's bytes
// are the node copy's mapping where there is one (each receiver checks
// them), else read once into the round's buffer and checked here; every
// receiver's message views the same bytes.
Status Serve(Recovery& x, const Transfer& tr, FileCache& node_files, FileCache& pers_files,
             std::vector<std::pair<int, uint32_t>>* newly_bad) {
  const Unit& unit = x.ut.units[tr.unit];
  const bool persistent = tr.source == kPersistent;
  if (persistent && !x.persistent_manifest_checked) {
    SP_ASSIGN_OR_RETURN(std::string theirs,
                        internal_source::ReadManifestBytes(x.persistent, x.persistent_dir));
    if (theirs != x.manifest_bytes) {
      return FailedPreconditionError("local load: the persistent checkpoint '" + x.persistent_dir +
                                     "' is not the local checkpoint '" + x.dir +
                                     "' (their manifests differ)");
    }
    x.persistent_manifest_checked = std::make_unique<Manifest>();
  }
  Result<const char*> got = persistent ? static_cast<const char*>(nullptr) : MappedUnit(x, unit);
  bool checked = false;
  if (got.ok() && *got == nullptr) {
    char* at = x.reads.Take(unit.nbytes);  // sized for the round (Reserve)
    const Status read = ReadUnitInto(persistent ? pers_files : node_files, x.m, unit, at);
    got = read.ok() ? Result<const char*>(at) : Result<const char*>(read);
    checked = true;
  }
  const int me = x.comm.rank();
  const bool mine = std::find(tr.receivers.begin(), tr.receivers.end(), me) != tr.receivers.end();
  if (got.ok() && !checked && mine && Checksum64(*got, unit.nbytes) != unit.checksum) {
    got = DataLossError(UnitName(x.m, unit) + ": checksum mismatch");
  }
  if (!got.ok()) newly_bad->emplace_back(tr.source, tr.unit);
  if (got.ok() && persistent) x.result.bytes_persistent += unit.nbytes;
  for (int r : tr.receivers) {
    if (r == me) {
      if (got.ok()) Arrive(x, tr.unit, *got);
      continue;
    }
    PutHeader(x, r, tr.unit, tr.source, got.ok());
    if (got.ok()) x.out[r].emplace_back(*got, unit.nbytes);
  }
  return OkStatus();
}

// Step 4, what this rank received in a round: each unit checked where it
// arrived (the sender's memory, or the receive buffer reused by every
// round), then placed from there a few MiB at a time (still in the cache).
Status Receive(Recovery& x, const std::vector<std::vector<std::string_view>>& recv,
               std::vector<std::pair<int, uint32_t>>* newly_bad) {
  uint64_t batch = 0;  // bytes arrived since the last placement
  for (size_t s = 0; s < recv.size(); ++s) {
    MessageReader in(recv[s]);
    while (!in.done()) {
      std::string_view h;
      if (!in.Take(kHeader, &h)) {
        return DataLossError("local tier units from rank " + std::to_string(s) + ": truncated");
      }
      uint32_t u = 0, source = 0;
      std::memcpy(&u, h.data(), 4);
      std::memcpy(&source, h.data() + 4, 4);
      const bool ok = h[8] != 0;
      if (u >= x.ut.units.size()) return DataLossError("local tier: unit out of range");
      const Unit& unit = x.ut.units[u];
      const int src = static_cast<int>(source);
      if (!ok) continue;  // the server marked the copy bad itself
      std::string_view bytes;
      if (!in.Take(unit.nbytes, &bytes)) return DataLossError("local tier: truncated unit");
      if (Checksum64(bytes.data(), unit.nbytes) != unit.checksum) {
        newly_bad->emplace_back(src, u);
        continue;
      }
      x.result.bytes_received += unit.nbytes;
      if (src != kPersistent) x.result.bytes_peer += unit.nbytes;
      Arrive(x, u, bytes.data());
      batch += unit.nbytes;
      if (batch >= kPlaceBatchBytes) {
        SP_RETURN_IF_ERROR(x.placer->FromMemory(x.arrived));
        x.arrived.clear();
        batch = 0;
      }
    }
  }
  return OkStatus();
}

// One round's AllToAll of x.out; `take` runs on what this rank received.
// Thread ranks (the thread comms' ViewAllToAll) read the pieces in place,
// in the senders' memory, valid only while `take` runs: the lost bytes are
// not copied by the Comm. Other Comms send each message gathered into one
// buffer of *send and receive into *recv, both reused by every round.
Status ExchangeRound(
    Recovery& x, std::vector<std::string>* send, std::vector<std::string>* recv,
    const std::function<void(const std::vector<std::vector<std::string_view>>&)>& take) {
  if (auto* views = dynamic_cast<internal_comm::ViewAllToAll*>(&x.comm)) {
    return views->AllToAllPieces(x.out, [&](const auto& in) {
      take(in);
      return OkStatus();
    });
  }
  for (size_t r = 0; r < x.out.size(); ++r) {
    size_t n = 0;
    for (std::string_view p : x.out[r]) n += p.size();
    (*send)[r].resize(n);  // only growth is zero-filled
    char* at = (*send)[r].data();
    for (std::string_view p : x.out[r]) {
      if (!p.empty()) std::memcpy(at, p.data(), p.size());
      at += p.size();
    }
  }
  SP_RETURN_IF_ERROR(x.comm.AllToAll(*send, recv));
  std::vector<std::vector<std::string_view>> in(recv->size());
  for (size_t r = 0; r < recv->size(); ++r) in[r] = {(*recv)[r]};
  take(in);
  return OkStatus();
}

// Before this rank serves its part of a round: room for its headers and for
// the units it reads (those not in a mapping), so that the round's views
// never move; the messages emptied.
void Reserve(Recovery& x, const std::vector<Transfer>& transfers,
             const std::vector<size_t>& round) {
  const int me = x.comm.rank();
  size_t headers = 0, reads = 0;
  for (size_t i : round) {
    const Transfer& tr = transfers[i];
    if (tr.server != me) continue;
    headers += kHeader * tr.receivers.size();
    if (!SentFromMapping(x, tr)) reads += x.ut.units[tr.unit].nbytes;
  }
  x.headers.Reset(headers);
  x.reads.Reset(reads);
  x.out.resize(x.comm.size());
  for (std::vector<std::string_view>& m : x.out) m.clear();
  x.arrived.clear();
}

}  // namespace shardpoint::internal_local
