#include "src/checkpoint/verify.h"

#include <map>
#include <mutex>

#include "src/checkpoint/data_header.h"
#include "src/checkpoint/reader.h"
#include "src/format/safetensors.h"
#include "src/io/path.h"
#include "src/io/resources.h"
#include "src/io/thread_pool.h"
#include "src/plan/save_plan.h"
#include "src/plan/tiling.h"
#include "src/source/manifest_read.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::DecodeSafetensorsHeader;
using shardpoint::internal_format::DecodeSafetensorsHeaderLength;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::SafetensorsHeader;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_io::ParallelFor;
using shardpoint::internal_plan::CheckTiling;
using shardpoint::internal_plan::ChunkEntryName;
using shardpoint::internal_plan::ObjectEntryName;
using shardpoint::internal_source::ReadManifest;

namespace shardpoint::internal_checkpoint {
namespace {

std::string ChunkWhere(const Manifest& m, const TensorRecord& t, size_t i) {
  const ChunkRecord& c = t.chunks[i];
  return "chunk " + std::to_string(i) + " in '" + m.files[c.file] + "' bytes [" +
         std::to_string(c.offset) + ", " + std::to_string(c.offset + c.nbytes) + ")";
}

// Every data file must be a valid safetensors file, and the one the writer
// wrote: its header is exactly what the manifest implies, so that altered
// padding or __metadata__ (which no entry check sees) is a fault too.
void CompareHeaderBytes(const Manifest& m, size_t f, const std::string& raw,
                        std::vector<VerifyFault>* faults) {
  const std::string implied = ImpliedDataFileHeader(m, static_cast<uint32_t>(f));
  if (raw == implied) return;
  size_t at = 0;
  while (at < raw.size() && at < implied.size() && raw[at] == implied[at]) ++at;
  VerifyFault v;
  v.kind = VerifyFault::Kind::kFileHeader;
  v.file = m.files[f];
  v.message = "'" + m.files[f] + "': header bytes [0, " + std::to_string(raw.size()) +
              ") differ from the header the manifest implies (" + std::to_string(implied.size()) +
              " bytes) from byte " + std::to_string(at);
  faults->push_back(std::move(v));
}

// The safetensors header of every data file must describe exactly the
// manifest's chunks and objects in that file.
void CheckHeaders(Storage* storage, const std::string& dir, const Manifest& m,
                  std::vector<VerifyFault>* faults) {
  const auto fault = [&](size_t f, std::string message) {
    VerifyFault v;
    v.kind = VerifyFault::Kind::kFileHeader;
    v.file = m.files[f];
    v.message = std::move(message);
    faults->push_back(std::move(v));
  };
  std::vector<std::map<std::string, SafetensorsEntry>> expected(m.files.size());
  for (const TensorRecord& t : m.tensors) {
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const ChunkRecord& c = t.chunks[i];
      expected[c.file][ChunkEntryName(t.key, i)] = SafetensorsEntry{
          ChunkEntryName(t.key, i), t.dtype, c.box.shape, c.offset, c.offset + c.nbytes};
    }
  }
  for (const ObjectRecord& o : m.objects) {
    expected[o.file][ObjectEntryName(o)] = SafetensorsEntry{ObjectEntryName(o),
                                                            DType::kU8,
                                                            {static_cast<int64_t>(o.nbytes)},
                                                            o.offset,
                                                            o.offset + o.nbytes};
  }
  for (size_t f = 0; f < m.files.size(); ++f) {
    const std::string path = JoinPath(dir, m.files[f]);
    std::string raw;  // the header's bytes, length included
    Result<SafetensorsHeader> header = [&]() -> Result<SafetensorsHeader> {
      SP_ASSIGN_OR_RETURN(auto file, storage->NewReadableFile(path));
      SP_ASSIGN_OR_RETURN(uint64_t size, file->Size());
      std::string first8(8, '\0');
      if (size < 8)
        return DataLossError("'" + path + "' has only " + std::to_string(size) + " bytes");
      SP_RETURN_IF_ERROR(file->ReadAt(0, 8, first8.data()));
      SP_ASSIGN_OR_RETURN(uint64_t n, DecodeSafetensorsHeaderLength(first8, size, path));
      std::string json(n, '\0');
      SP_RETURN_IF_ERROR(file->ReadAt(8, n, json.data()));
      raw = first8 + json;
      return DecodeSafetensorsHeader(json, size, path);
    }();
    if (!header.ok()) {
      fault(f, header.status().ToString());
      continue;
    }
    const size_t faults_before = faults->size();
    for (const SafetensorsEntry& e : header->entries) {
      auto it = expected[f].find(e.name);
      if (it == expected[f].end()) {
        fault(f, "'" + m.files[f] + "': entry '" + e.name + "' is not in the manifest");
        continue;
      }
      const SafetensorsEntry& x = it->second;
      if (x.dtype != e.dtype || x.shape != e.shape || x.begin != header->data_start + e.begin ||
          x.end != header->data_start + e.end) {
        fault(f, "'" + m.files[f] + "': entry '" + e.name + "' (" +
                     std::string(DTypeName(e.dtype)) + " " + ShapeToString(e.shape) +
                     " at bytes [" + std::to_string(header->data_start + e.begin) + ", " +
                     std::to_string(header->data_start + e.end) +
                     ")) disagrees with the manifest (" + std::string(DTypeName(x.dtype)) + " " +
                     ShapeToString(x.shape) + " at bytes [" + std::to_string(x.begin) + ", " +
                     std::to_string(x.end) + "))");
      }
      expected[f].erase(it);
    }
    for (const auto& [name, e] : expected[f]) {
      fault(f, "'" + m.files[f] + "': the header lacks entry '" + name + "'");
    }
    if (faults->size() == faults_before) CompareHeaderBytes(m, f, raw, faults);
  }
}

}  // namespace

Result<VerifyReport> VerifyCheckpoint(Storage* storage, const std::string& dir,
                                      const VerifyOptions& options) {
  VerifyReport report;
  SP_ASSIGN_OR_RETURN(report.manifest, ReadManifest(storage, dir));
  const Manifest& m = report.manifest;
  std::vector<VerifyFault>& faults = report.faults;

  for (const TensorRecord& t : m.tensors) {
    std::vector<Box> boxes;
    for (const ChunkRecord& c : t.chunks) boxes.push_back(c.box);
    Status s = CheckTiling(t.key, t.shape, boxes, [&](size_t i) { return ChunkWhere(m, t, i); });
    if (!s.ok()) {
      VerifyFault v;
      v.kind = VerifyFault::Kind::kTiling;
      v.key = t.key;
      v.message = s.message();
      faults.push_back(std::move(v));
    }
  }
  CheckHeaders(storage, dir, m, &faults);

  // Every checksum, in parallel, in bounded memory (one chunk per task, read
  // in slices).
  struct Item {
    uint32_t file;
    uint64_t offset, nbytes, checksum;
    std::string what;
    VerifyFault where;  // kind, key, chunk or object index: filled in on a fault
    const std::vector<uint64_t>* blocks;
  };
  const std::vector<uint64_t> no_blocks;
  std::vector<Item> items;
  for (const TensorRecord& t : m.tensors) {
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const ChunkRecord& c = t.chunks[i];
      VerifyFault where;
      where.kind = VerifyFault::Kind::kChunk;
      where.key = t.key;
      where.chunk = static_cast<int64_t>(i);
      items.push_back({c.file, c.offset, c.nbytes, c.checksum,
                       "tensor '" + t.key + "' chunk " + std::to_string(i) + " " + c.box.ToString(),
                       std::move(where), &c.block_sums});
    }
  }
  for (const ObjectRecord& o : m.objects) {
    VerifyFault where;
    where.kind = VerifyFault::Kind::kObject;
    where.key = o.key;
    where.object_index = o.index;
    items.push_back({o.file, o.offset, o.nbytes, o.checksum,
                     "object '" + o.key + "' " + ShapeToString(o.index), std::move(where),
                     &no_blocks});
  }
  // Largest first, so that the last tasks are short ones.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.nbytes > b.nbytes; });
  uint64_t total = 0, done = 0;
  for (const Item& it : items) total += it.nbytes;
  DataFiles files(storage, dir, &m);
  CallResources res(options);
  std::mutex mu;
  const auto on_slice = [&](uint64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    done += n;
    if (options.progress) options.progress(done, total);
  };
  Status ignored = ParallelFor(res.pool(), static_cast<int64_t>(items.size()), [&](int64_t i) {
    const Item& it = items[i];
    Status s = CheckStored(&files, m, it.file, it.offset, it.nbytes, it.checksum, *it.blocks,
                           it.what, options.read_slice_bytes, options.prefetch_bytes, on_slice);
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok()) {
      VerifyFault v = it.where;
      v.file = m.files[it.file];
      v.begin = it.offset;
      v.end = it.offset + it.nbytes;
      v.message = s.message();
      faults.push_back(std::move(v));
    }
    report.bytes_checked += it.nbytes;
    return OkStatus();
  });
  report.chunks_checked = static_cast<int64_t>(items.size() - m.objects.size());
  report.objects_checked = static_cast<int64_t>(m.objects.size());
  std::sort(faults.begin(), faults.end(),
            [](const VerifyFault& a, const VerifyFault& b) { return a.message < b.message; });
  return report;
}

}  // namespace shardpoint::internal_checkpoint
