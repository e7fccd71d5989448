#include "src/checkpoint/verify_dcp.h"

#include <algorithm>
#include <memory>

#include "shardpoint/checkpoint_kind.h"
#include "src/dcp/dcp_dir.h"
#include "src/dcp/zip.h"
#include "src/io/path.h"
#include "src/plan/tiling.h"
#include "src/source/open_source.h"

using shardpoint::internal_dcp::Crc32;
using shardpoint::internal_dcp::DcpCheckedEntry;
using shardpoint::internal_dcp::kDcpMetadataName;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_plan::CheckTiling;
using shardpoint::internal_source::OpenCheckpointSource;
using shardpoint::internal_source::Source;

namespace shardpoint::internal_checkpoint {

namespace {

// A fault per tensor whose chunks do not tile it exactly.
void CheckTilings(const Manifest& m, VerifyReport* report) {
  for (const TensorRecord& t : m.tensors) {
    std::vector<Box> boxes;
    for (const ChunkRecord& c : t.chunks) boxes.push_back(c.box);
    Status s = CheckTiling(t.key, t.shape, boxes, [&](size_t i) {
      return "chunk " + t.chunks[i].box.ToString() + " in '" + m.files[t.chunks[i].file] + "'";
    });
    if (!s.ok()) {
      VerifyFault f;
      f.kind = VerifyFault::Kind::kTiling;
      f.key = t.key;
      f.message = s.message();
      report->faults.push_back(std::move(f));
    }
  }
}

}  // namespace

Result<VerifyReport> VerifyDcp(Storage* storage, const std::string& dir,
                               const VerifyOptions& options) {
  VerifyReport report;
  // Opened by the door as the kind the caller decided (VerifyCheckpoint:
  // DetectCheckpointKind), the index built once.
  Result<Source> src = OpenCheckpointSource(storage, dir, CheckpointKind::kPyTorchDcp);
  if (!src.ok()) {
    VerifyFault f;
    f.kind = VerifyFault::Kind::kFileHeader;
    f.file = kDcpMetadataName;
    f.message = src.status().ToString();
    report.faults.push_back(std::move(f));
    return report;
  }
  report.manifest = std::move(src->index);
  const Manifest& m = report.manifest;
  CheckTilings(m, &report);

  uint64_t total = 0;
  for (const DcpCheckedEntry& e : src->dcp_entries) total += e.nbytes;
  std::vector<std::unique_ptr<ReadableFile>> files(m.files.size());
  const uint64_t slice = std::max<uint64_t>(1, options.read_slice_bytes);
  std::unique_ptr<char[]> buf(new char[slice]);
  for (const DcpCheckedEntry& e : src->dcp_entries) {
    Status s = [&]() -> Status {
      if (!files[e.file]) {
        SP_ASSIGN_OR_RETURN(files[e.file],
                            storage->NewReadableFile(JoinPath(dir, m.files[e.file])));
      }
      uint32_t crc = 0;
      for (uint64_t done = 0; done < e.nbytes;) {
        const uint64_t n = std::min(slice, e.nbytes - done);
        SP_RETURN_IF_ERROR(files[e.file]->ReadAt(e.offset + done, n, buf.get()));
        crc = Crc32(crc, buf.get(), n);
        done += n;
        report.bytes_checked += n;
        if (options.progress) options.progress(report.bytes_checked, total);
      }
      if (crc != e.crc32) {
        return DataLossError(e.what + ": CRC-32 mismatch of bytes [" + std::to_string(e.offset) +
                             ", " + std::to_string(e.offset + e.nbytes) + ") of '" +
                             m.files[e.file] + "' (the zip records " + std::to_string(e.crc32) +
                             ", the data has " + std::to_string(crc) + ")");
      }
      return OkStatus();
    }();
    ++report.chunks_checked;
    if (!s.ok()) {
      VerifyFault f;
      f.kind = VerifyFault::Kind::kChunk;
      f.key = e.key;
      f.chunk = e.chunk;
      f.file = m.files[e.file];
      f.begin = e.offset;
      f.end = e.offset + e.nbytes;
      f.message = s.ToString();
      report.faults.push_back(std::move(f));
    }
  }
  report.objects_checked = static_cast<int64_t>(m.objects.size());
  std::sort(report.faults.begin(), report.faults.end(),
            [](const VerifyFault& a, const VerifyFault& b) { return a.message < b.message; });
  return report;
}

}  // namespace shardpoint::internal_checkpoint
