#include "src/local/drain.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "src/checkpoint/commit.h"
#include "src/format/checksum.h"
#include "src/io/path.h"
#include "src/local/units.h"

using shardpoint::internal_format::Checksum64;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_local {
namespace {

constexpr uint64_t kSliceBytes = uint64_t{8} << 20;

// Sleeps until `done` bytes are no faster than `rate` since `start`.
void Throttle(std::chrono::steady_clock::time_point start, uint64_t done, uint64_t rate) {
  if (rate == 0) return;
  const auto due = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(static_cast<double>(done) / rate));
  std::this_thread::sleep_until(due);
}

// Byte ranges [from, to) of file f to copy, each with the units it holds
// whole: the slices of replication, then whatever follows the last unit.
struct Piece {
  uint64_t from, to;
  size_t first, end;  // units
};

std::vector<Piece> PiecesOf(const UnitTable& ut, uint32_t f, uint64_t size) {
  std::vector<Piece> out;
  uint64_t at = 0;
  for (const auto& [i, j] : SlicesOf(ut, f, kSliceBytes)) {
    const uint64_t to = ut.units[j - 1].offset + ut.units[j - 1].nbytes;
    out.push_back(Piece{at, to, i, j});
    at = to;
  }
  for (; at < size; at = std::min(size, at + kSliceBytes)) {
    out.push_back(Piece{at, std::min(size, at + kSliceBytes), 0, 0});
  }
  return out;
}

Status CopyFile(Storage* node, const std::string& local_dir, Storage* persistent, uint32_t f,
                const UnitTable& ut, uint64_t rate, std::chrono::steady_clock::time_point start,
                Drain* d, std::string* buf) {
  const std::string& name = d->manifest.files[f];
  SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> in,
                      node->NewReadableFile(JoinPath(local_dir, name)));
  SP_ASSIGN_OR_RETURN(uint64_t size, in->Size());
  if (size < ut.extent[f]) {
    return DataLossError("local checkpoint file '" + in->path() + "' holds " +
                         std::to_string(size) + " bytes, its manifest " +
                         std::to_string(ut.extent[f]));
  }
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out,
                      persistent->NewWritableFile(JoinPath(d->write_dir, name), {}));
  for (const Piece& p : PiecesOf(ut, f, size)) {
    buf->resize(p.to - p.from);
    SP_RETURN_IF_ERROR(in->ReadAt(p.from, buf->size(), buf->data()));
    for (size_t u = p.first; u < p.end; ++u) {
      const Unit& unit = ut.units[u];
      if (Checksum64(buf->data() + (unit.offset - p.from), unit.nbytes) != unit.checksum) {
        return DataLossError("draining " + UnitName(d->manifest, unit) + " of '" + local_dir +
                             "': checksum mismatch in the local copy");
      }
    }
    SP_RETURN_IF_ERROR(out->WriteAt(p.from, buf->data(), buf->size()));
    d->bytes += buf->size();
    Throttle(start, d->bytes, rate);
  }
  SP_RETURN_IF_ERROR(out->Sync());
  return out->Close();
}

}  // namespace

std::vector<uint32_t> DrainFiles(const std::vector<std::vector<std::string>>& map_nodes,
                                 const std::string& node_id, int local_index, int node_ranks) {
  std::vector<uint32_t> out;
  int i = 0;
  for (size_t f = 0; f < map_nodes.size(); ++f) {
    if (map_nodes[f].empty() || map_nodes[f][0] != node_id) continue;
    if (i++ % node_ranks == local_index) out.push_back(static_cast<uint32_t>(f));
  }
  return out;
}

void CopyFiles(Storage* node, const std::string& local_dir, Storage* persistent,
               const std::vector<uint32_t>& files, uint64_t bytes_per_second, Drain* d) {
  const UnitTable ut = UnitsOf(d->manifest);
  const auto start = std::chrono::steady_clock::now();
  std::string buf;
  for (uint32_t f : files) {
    d->status = CopyFile(node, local_dir, persistent, f, ut, bytes_per_second, start, d, &buf);
    if (!d->status.ok()) return;
  }
}

}  // namespace shardpoint::internal_local
