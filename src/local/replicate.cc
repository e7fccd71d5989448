#include "src/local/replicate.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "src/base/guard.h"
#include "src/comm/agreed.h"
#include "src/format/checksum.h"
#include "src/io/path.h"
#include "src/local/replica_map.h"
#include "src/local/units.h"
#include "src/source/manifest_read.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_format::Checksum64;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_source::ReadManifestBytes;

namespace shardpoint::internal_local {
namespace {

// Writes `bytes` as `dir`/`name` through a temporary name and a rename.
Status WriteAtomically(Storage* node, const std::string& dir, const std::string& name,
                       const std::string& bytes) {
  const std::string tmp = JoinPath(dir, name + ".tmp");
  SP_RETURN_IF_ERROR(node->WriteStringToFile(tmp, bytes));
  return node->Rename(tmp, JoinPath(dir, name));
}

// Manifest file index of each rank's data file (-1: the rank wrote none).
std::vector<int> FileOfRank(const Manifest& m, int ranks) {
  std::vector<int> out(ranks, -1);
  for (size_t f = 0; f < m.files.size(); ++f) {
    const std::string& name = m.files[f];
    for (int r = 0; r < ranks; ++r) {
      if (name == "data/" + std::to_string(r) + ".safetensors") out[r] = static_cast<int>(f);
    }
  }
  return out;
}

// Step 1: every rank gets the manifest; every node other than rank 0's holds it.
Result<Manifest> ShareManifest(Comm& comm, const Topology& t, Storage* node,
                               const std::string& dir) {
  std::string bytes;
  Status s;
  if (comm.rank() == 0) {
    Result<std::string> read =
        Guarded("local tier: reading the manifest", [&] { return ReadManifestBytes(node, dir); });
    s = read.status();
    if (read.ok()) bytes = std::move(*read);
  }
  SP_RETURN_IF_ERROR(internal_comm::BroadcastAgreed(comm, s, &bytes, 0));
  Result<Manifest> m = DecodeManifest(bytes, JoinPath(dir, kManifestName));
  Status local = m.status();
  const int me = comm.rank();
  if (local.ok() && t.local_index(me) == 0 && t.node_of(me) != t.node_of(0)) {
    local = Guarded("local tier: writing the manifest",
                    [&] { return WriteAtomically(node, dir, kManifestName, bytes); });
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, local));
  return m;
}

// The replica map every node writes: each rank's file, its node, its targets.
ReplicaMap MapOf(const Manifest& m, const Topology& t, const std::vector<int>& file_of,
                 int replicas) {
  ReplicaMap map;
  for (size_t f = 0; f < m.files.size(); ++f) {
    const auto it = std::find(file_of.begin(), file_of.end(), static_cast<int>(f));
    std::vector<std::string> nodes;
    if (it != file_of.end()) {
      const int r = static_cast<int>(it - file_of.begin());
      nodes.push_back(t.nodes[t.node_of(r)]);
      for (int target : ReplicaTargets(t, r, replicas)) nodes.push_back(t.nodes[t.node_of(target)]);
    }
    map.files.emplace_back(m.files[f], std::move(nodes));
  }
  return map;
}

// Checks every unit of slice [first, end) of a file, held at `mem` from file
// byte `from`.
Status CheckSlice(const Manifest& m, const UnitTable& ut, size_t first, size_t end, uint64_t from,
                  const std::string& mem, int sender) {
  for (size_t i = first; i < end; ++i) {
    const Unit& u = ut.units[i];
    if (u.offset + u.nbytes - from > mem.size()) {
      return DataLossError("replica of " + UnitName(m, u) + " from rank " + std::to_string(sender) +
                           ": truncated slice");
    }
    const uint64_t got = Checksum64(mem.data() + (u.offset - from), u.nbytes);
    if (got != u.checksum) {
      return DataLossError("replica of " + UnitName(m, u) + " from rank " + std::to_string(sender) +
                           ": checksum mismatch; not written");
    }
  }
  return OkStatus();
}

struct Transfer {
  const Manifest& m;
  const UnitTable& ut;
  const std::vector<int>& file_of;
  std::vector<std::vector<std::pair<size_t, size_t>>> slices;  // per rank's file
  std::unique_ptr<ReadableFile> mine;
  std::map<int, std::unique_ptr<WritableFile>> incoming;  // per sender
};

uint64_t SliceFrom(const Transfer& x, int r, size_t k) {
  if (k == 0) return 0;
  const Unit& last = x.ut.units[x.slices[r][k - 1].second - 1];
  return last.offset + last.nbytes;
}

// This rank's part of round k: what it sends.
Status SendSlice(Transfer& x, int me, size_t k, const std::vector<int>& targets,
                 std::vector<std::string>* send, uint64_t* sent) {
  if (targets.empty() || k >= x.slices[me].size()) return OkStatus();
  const auto [first, end] = x.slices[me][k];
  const uint64_t from = SliceFrom(x, me, k);
  const Unit& last = x.ut.units[end - 1];
  // Read into the first target's buffer, kept from round to round: fresh
  // memory costs a page fault per page (several times a copy in a VM).
  std::string& first_buf = (*send)[targets.front()];
  first_buf.resize(last.offset + last.nbytes - from);
  SP_RETURN_IF_ERROR(x.mine->ReadAt(from, first_buf.size(), first_buf.data()));
  for (int t : targets) {
    if (t != targets.front()) (*send)[t].assign(first_buf);
    *sent += first_buf.size();
  }
  return OkStatus();
}

// This rank's part of round k: checks and writes what it received.
Status ReceiveSlices(Transfer& x, Storage* node, const std::string& dir, size_t k,
                     const std::vector<std::string>& recv, uint64_t* received) {
  for (size_t s = 0; s < recv.size(); ++s) {
    if (recv[s].empty()) continue;
    const int sender = static_cast<int>(s);
    if (x.file_of[sender] < 0 || k >= x.slices[sender].size()) {
      return InternalError("local tier: rank " + std::to_string(sender) +
                           " sent a replica slice it does not have");
    }
    const auto [first, end] = x.slices[sender][k];
    const uint64_t from = SliceFrom(x, sender, k);
    SP_RETURN_IF_ERROR(CheckSlice(x.m, x.ut, first, end, from, recv[s], sender));
    std::unique_ptr<WritableFile>& f = x.incoming[sender];
    if (!f) {
      SP_ASSIGN_OR_RETURN(f, node->NewWritableFile(JoinPath(dir, x.m.files[x.file_of[sender]]),
                                                   WriteFileOptions{}));
    }
    SP_RETURN_IF_ERROR(f->WriteAt(from, recv[s].data(), recv[s].size()));
    *received += recv[s].size();
  }
  return OkStatus();
}

// Step 2: the rounds. A rank that failed keeps taking part (sending
// nothing) and returns its first error.
Status Transfers(Comm& comm, const Topology& t, Storage* node, const std::string& dir,
                 const LocalTierOptions& o, Transfer& x, LocalSaveStats* st) {
  const int me = comm.rank();
  size_t rounds = 0;
  for (int r = 0; r < comm.size(); ++r) {
    if (x.file_of[r] >= 0) {
      x.slices[r] = SlicesOf(x.ut, x.file_of[r], std::max<uint64_t>(o.round_bytes, 1));
    }
    if (!ReplicaTargets(t, r, o.replicas).empty()) rounds = std::max(rounds, x.slices[r].size());
  }
  const std::vector<int> targets = ReplicaTargets(t, me, o.replicas);
  Status s;
  if (x.file_of[me] >= 0 && !targets.empty()) {
    s = Guarded("local tier: opening this rank's data file", [&]() -> Status {
      SP_ASSIGN_OR_RETURN(x.mine, node->NewReadableFile(JoinPath(dir, x.m.files[x.file_of[me]])));
      return OkStatus();
    });
  }
  std::vector<std::string> send(comm.size()), recv;  // buffers reused by every round
  for (size_t k = 0; k < rounds; ++k) {
    for (std::string& b : send) b.clear();
    if (s.ok()) {
      s = Guarded("local tier: reading a replica slice",
                  [&] { return SendSlice(x, me, k, targets, &send, &st->bytes_sent); });
    }
    SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
    if (s.ok()) {
      s = Guarded("local tier: writing a replica slice",
                  [&] { return ReceiveSlices(x, node, dir, k, recv, &st->bytes_received); });
    }
  }
  for (auto& [sender, f] : x.incoming) {
    Status closed = f->Close();
    if (s.ok()) s = closed;
  }
  return s;
}

}  // namespace

Status Replicate(Comm& comm, const Topology& t, Storage* node, const std::string& dir,
                 const LocalTierOptions& options, LocalSaveStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  SP_ASSIGN_OR_RETURN(Manifest m, ShareManifest(comm, t, node, dir));
  const UnitTable ut = UnitsOf(m);
  const std::vector<int> file_of = FileOfRank(m, comm.size());
  Transfer x{m,  ut, file_of, std::vector<std::vector<std::pair<size_t, size_t>>>(comm.size()),
             {}, {}};
  Status s = Transfers(comm, t, node, dir, options, x, stats);
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  const int me = comm.rank();
  if (t.local_index(me) == 0) {
    s = Guarded("local tier: writing the replica map", [&] {
      return WriteAtomically(node, dir, kReplicaMapName,
                             EncodeReplicaMap(MapOf(m, t, file_of, options.replicas)));
    });
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  stats->replicate_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return OkStatus();
}

}  // namespace shardpoint::internal_local
