#include "src/local/recovery.h"

#include "src/format/checksum.h"
#include "src/io/path.h"

namespace shardpoint::internal_local {

using internal_format::Checksum64;
using internal_format::Manifest;

// Notes a verified unit that reached this rank: a tensor unit is placed
// with the round's others; an object unit is kept for the pipeline.
void Arrive(Recovery& x, uint32_t u, const char* bytes) {
  const Unit& unit = x.ut.units[u];
  if (x.placer->IsTensor(u)) {
    x.arrived.emplace_back(u, bytes);
    return;
  }
  const std::string& kept = x.kept_objects.emplace_back(bytes, unit.nbytes);
  x.overlay.units[unit.file][unit.offset] = kept;
}

// Reads unit u into dst (u.nbytes) and checks it against its checksum.
Status ReadUnitInto(FileCache& files, const Manifest& m, const Unit& u, char* dst) {
  std::unique_ptr<ReadableFile>& f = files.open[u.file];
  if (!f) {
    SP_ASSIGN_OR_RETURN(
        f, files.storage->NewReadableFile(internal_io::JoinPath(files.dir, m.files[u.file])));
  }
  SP_RETURN_IF_ERROR(f->ReadAt(u.offset, u.nbytes, dst));
  if (Checksum64(dst, u.nbytes) != u.checksum) {
    return DataLossError(UnitName(m, u) + ": checksum mismatch");
  }
  return OkStatus();
}

// The same into *bytes, reused from unit to unit (fresh memory costs a
// page fault per page).
Status ReadUnit(FileCache& files, const Manifest& m, const Unit& u, std::string* bytes) {
  bytes->resize(u.nbytes);
  return ReadUnitInto(files, m, u, bytes->data());
}

}  // namespace shardpoint::internal_local
