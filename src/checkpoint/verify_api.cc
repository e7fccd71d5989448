// The public DescribeCheckpoint and VerifyCheckpoint (shardpoint/verify.h):
// thin adapters over the manifest and the internal verify
// (src/checkpoint/verify.h), converting to the public result types.
#include <chrono>
#include <cstdio>

#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/verify.h"
#include "src/checkpoint/verify.h"
#include "src/checkpoint/verify_dcp.h"
#include "src/format/manifest.h"
#include "src/io/read_size.h"
#include "src/io/resources.h"
#include "src/source/open_source.h"

namespace shardpoint {
namespace {

CheckpointDescription Describe(const internal_format::Manifest& m) {
  CheckpointDescription d;
  d.format_version = m.version;
  d.files = m.files;
  d.tensors.reserve(m.tensors.size());
  for (const internal_format::TensorRecord& t : m.tensors) {
    TensorDescription td{t.key, t.dtype, t.shape, {}};
    td.chunks.reserve(t.chunks.size());
    for (const internal_format::ChunkRecord& c : t.chunks) {
      td.chunks.push_back(ChunkDescription{c.box, c.file, c.offset, c.nbytes, c.checksum});
    }
    d.tensors.push_back(std::move(td));
  }
  d.objects.reserve(m.objects.size());
  for (const internal_format::ObjectRecord& o : m.objects) {
    d.objects.push_back(ObjectDescription{o.key, o.index, o.grid, o.file, o.offset, o.nbytes});
  }
  d.has_common = m.has_common;
  d.common_bytes = m.common.size();
  d.metadata_json = m.metadata_json;
  d.json = internal_format::ManifestToJson(m);
  return d;
}

}  // namespace

uint64_t TensorDescription::nbytes() const {
  uint64_t n = 0;
  for (const ChunkDescription& c : chunks) n += c.nbytes;
  return n;
}

Result<CheckpointDescription> DescribeCheckpoint(const std::string& dir,
                                                 const DescribeOptions& options) {
  Storage* storage = internal_io::CallResources(options).storage();
  // A PyTorch DCP directory (docs/dcp.md) is described from its index.
  SP_ASSIGN_OR_RETURN(internal_source::Source src,
                      internal_source::OpenCheckpointSource(storage, dir));
  CheckpointDescription d = Describe(src.index);
  d.kind = src.checkpoint_kind;
  return d;
}

namespace {

Result<VerifyReport> Verify(const std::string& dir, const VerifyOptions& options,
                            internal_io::CallResources& res) {
  const auto start = std::chrono::steady_clock::now();
  internal_checkpoint::VerifyOptions o;
  o.read_slice_bytes = options.slice_bytes > 0 ? options.slice_bytes : options.read_slice_bytes;
  o.prefetch_bytes = options.prefetch_bytes;
  o.progress = options.progress;
  Storage* storage = res.storage();
  o.read_slice_bytes = internal_io::ReadSliceFor(storage, dir, o.read_slice_bytes);
  SP_ASSIGN_OR_RETURN(CheckpointKind kind, DetectCheckpointKind(dir, storage));
  const bool dcp = kind == CheckpointKind::kPyTorchDcp;
  if (!dcp) o.pool = res.pool();  // the DCP check reads sequentially
  SP_ASSIGN_OR_RETURN(internal_checkpoint::VerifyReport r,
                      dcp ? internal_checkpoint::VerifyDcp(storage, dir, o)
                          : internal_checkpoint::VerifyCheckpoint(storage, dir, o));
  VerifyReport report;
  report.kind = dcp ? CheckpointKind::kPyTorchDcp : CheckpointKind::kShardpoint;
  report.tensors = static_cast<int64_t>(r.manifest.tensors.size());
  report.chunks_checked = r.chunks_checked;
  report.objects_checked = r.objects_checked;
  report.bytes_checked = r.bytes_checked;
  report.files = static_cast<int64_t>(r.manifest.files.size());
  report.faults = std::move(r.faults);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

Result<VerifyReport> VerifyCheckpoint(const std::string& dir, const VerifyOptions& options) {
  // The deprecated spellings (threads, slice_bytes) win when set.
  internal_io::CallResources res(options, options.threads);
  Result<VerifyReport> r = Verify(dir, options, res);
  if (!r.ok()) {
    res.Log("shardpoint: verify of '" + dir + "' FAILED: " + r.status().ToString());
  } else {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%lld chunks, %lld objects, %.3f GB checked in %.3f s",
                  static_cast<long long>(r->chunks_checked),
                  static_cast<long long>(r->objects_checked), r->bytes_checked / 1e9, r->seconds);
    res.Log("shardpoint: verified '" + dir + "': " + buf + ", " +
            (r->ok() ? std::string("OK") : std::to_string(r->faults.size()) + " faults"));
  }
  return r;
}

}  // namespace shardpoint
