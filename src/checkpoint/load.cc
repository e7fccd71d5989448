// Load: the collective that fills every rank's state from a checkpoint.
//
//   1. rank 0 reads the manifest and broadcasts its bytes; all decode (for a
//      PyTorch DCP directory, the index src/dcp/ builds from it instead: its
//      chunks carry no checksums, so none are verified);
//   2. every rank checks its requests (missing keys, dtype, shape) and the
//      ranks exchange bitmaps of the stored tensors they requested, so that
//      keys no rank asked for are reported as unexpected, and their missing
//      keys, so that one error names both kinds;           (agree)
//   3. every rank plans and executes its reads;             (agree)
#include <algorithm>
#include <atomic>
#include <chrono>

#include "shardpoint/checkpoint.h"
#include "src/base/guard.h"
#include "src/checkpoint/commit.h"
#include "src/checkpoint/cooperative.h"
#include "src/checkpoint/reader.h"
#include "src/checkpoint/requests.h"
#include "src/dcp/dcp_dir.h"
#include "src/geometry/view.h"
#include "src/plan/load_plan.h"

namespace shardpoint {
namespace internal {
namespace {

const ObjectRecord* FindObject(const Manifest& m, const Object& o) {
  auto it = std::lower_bound(m.objects.begin(), m.objects.end(), o,
                             [](const ObjectRecord& r, const Object& q) {
                               return std::tie(r.key, r.index) < std::tie(q.key, q.index);
                             });
  if (it == m.objects.end() || it->key != o.key || it->index != o.index) return nullptr;
  return &*it;
}

// Checks this rank's requests against the manifest; marks requested tensors
// and objects (by key) in `wanted` (tensors first, then objects).
Status CheckRequests(const Manifest& m, const State& state, const LoadOptions& options,
                     std::vector<std::string>* missing, std::string* wanted) {
  wanted->assign(m.tensors.size() + m.objects.size(), '\0');
  for (const LocalTensor& lt : state.tensors) {
    for (const Segment& seg : lt.segments) {
      int64_t t = m.FindTensor(seg.key);
      if (t < 0) {
        missing->push_back(seg.key);
        continue;
      }
      (*wanted)[t] = 1;
      const TensorRecord& rec = m.tensors[t];
      if (rec.dtype != lt.dtype && !options.allow_dtype_conversion) {
        return InvalidArgumentError(
            "tensor '" + seg.key + "': requested dtype " + std::string(DTypeName(lt.dtype)) +
            " but the checkpoint holds " + std::string(DTypeName(rec.dtype)) +
            " (allow_dtype_conversion converts)");
      }
      const bool shape_ok =
          rec.shape == seg.global_shape ||
          (options.allow_shape_mismatch && rec.shape.size() == seg.global_shape.size());
      if (!shape_ok) {
        return InvalidArgumentError("tensor '" + seg.key + "': requested global shape " +
                                    ShapeToString(seg.global_shape) + " but the checkpoint holds " +
                                    ShapeToString(rec.shape) +
                                    (rec.shape.size() == seg.global_shape.size()
                                         ? " (allow_shape_mismatch loads the overlap)"
                                         : ""));
      }
    }
  }
  for (const Object& o : state.objects) {
    const ObjectRecord* r = FindObject(m, o);
    if (!r) {
      missing->push_back(o.index.empty() ? o.key : o.key + ShapeToString(o.index));
      continue;
    }
    for (size_t i = 0; i < m.objects.size(); ++i) {
      if (m.objects[i].key == o.key) (*wanted)[m.tensors.size() + i] = 1;
    }
  }
  if (state.common && !m.has_common && !options.common_optional) missing->push_back("<common>");
  std::sort(missing->begin(), missing->end());
  missing->erase(std::unique(missing->begin(), missing->end()), missing->end());
  return OkStatus();
}

// The manifest of `dir` as 'S' + its bytes, or for a DCP directory 'D' + the
// encoding of the index built from it.
Result<std::string> ReadIndexBytes(Storage* storage, const std::string& dir) {
  SP_ASSIGN_OR_RETURN(bool dcp, IsDcpDir(storage, dir));
  if (dcp) {
    SP_ASSIGN_OR_RETURN(DcpIndex idx, ReadDcpIndex(storage, dir));
    return "D" + EncodeDcpManifest(idx.m);
  }
  SP_ASSIGN_OR_RETURN(std::string bytes, ReadManifestBytes(storage, dir));
  return "S" + bytes;
}

Status LoadObjects(const Manifest& m, State& state, DataFiles* files, bool verify, uint64_t* bytes,
                   uint64_t* requests) {
  for (Object& o : state.objects) {
    const ObjectRecord* r = FindObject(m, o);
    if (!r) continue;
    // The size comes from disk: bound it by the file before allocating.
    SP_ASSIGN_OR_RETURN(const ReadableFile* file, files->Get(r->file));
    SP_ASSIGN_OR_RETURN(uint64_t file_size, file->Size());
    if (r->offset > file_size || r->nbytes > file_size - r->offset) {
      return DataLossError("object '" + o.key + "' in '" + m.files[r->file] + "': bytes [" +
                           std::to_string(r->offset) + ", " +
                           std::to_string(r->offset + r->nbytes) + ") lie beyond the end of the " +
                           std::to_string(file_size) + "-byte file");
    }
    o.bytes.resize(r->nbytes);
    const std::string what = "object '" + o.key + "'";
    if (!verify) {
      SP_ASSIGN_OR_RETURN(const ReadableFile* f, files->Get(r->file));
      Status read = f->ReadAt(r->offset, r->nbytes, o.bytes.data());
      if (!read.ok()) return read.WithContext(what);
      *bytes += r->nbytes;
      ++*requests;
      continue;
    }
    SP_RETURN_IF_ERROR(
        ReadVerified(files, m, r->file, r->offset, r->nbytes, r->checksum, what, o.bytes.data()));
    *bytes += r->nbytes;
    ++*requests;
  }
  if (state.common) {
    // Absent and not reported missing only under common_optional.
    state.common = m.has_common ? std::optional<std::string>(m.common) : std::nullopt;
  }
  state.metadata_json = m.metadata_json;
  return OkStatus();
}

// Sets every element of `v` to zero bytes (the part of a padded tensor that
// the checkpoint does not hold).
void ZeroFill(const View& v) {
  const std::vector<char> zero(v.elem_size, 0);
  StridedCopy(v,
              View{const_cast<char*>(zero.data()), v.elem_size, v.shape, Shape(v.shape.size(), 0)});
}

}  // namespace
}  // namespace internal

using namespace internal;

namespace {

Result<LoadResult> LoadCollective(State& state, const std::string& dir, Comm& comm,
                                  const LoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Storage* storage = options.storage ? options.storage : DefaultStorage();

  // 1. The manifest, read once. A PyTorch DCP directory (src/dcp/) is read
  // through the index rank 0 builds from it: no checksums to verify.
  std::string bytes;
  Status s;
  if (comm.rank() == 0) {
    Result<std::string> read =
        Guarded("load: reading the manifest", [&] { return ReadIndexBytes(storage, dir); });
    s = read.status();
    if (read.ok()) bytes = std::move(*read);
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  SP_RETURN_IF_ERROR(comm.Broadcast(&bytes, 0));
  const bool dcp = !bytes.empty() && bytes[0] == 'D';
  Result<Manifest> manifest = Guarded("load: decoding the manifest", [&] {
    return dcp ? DecodeDcpManifest(std::string_view(bytes).substr(1), dir)
               : DecodeManifest(std::string_view(bytes).substr(1), JoinPath(dir, kManifestName));
  });
  bytes.clear();
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, manifest.status()));
  const Manifest& m = *manifest;

  // 2. Requests. Missing keys travel with the bitmaps, so that a strict load
  // names every rank's missing keys and the unexpected ones in one error.
  LoadResult result;
  std::string wanted;
  s = Guarded("load: checking the requests",
              [&] { return CheckRequests(m, state, options, &result.missing_keys, &wanted); });
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  Result<GatheredRequests> gathered = GatherRequests(comm, wanted, result.missing_keys);
  s = gathered.status();
  if (s.ok()) {
    for (size_t i : gathered->unrequested) {
      result.unexpected_keys.push_back(i < m.tensors.size() ? m.tensors[i].key
                                                            : m.objects[i - m.tensors.size()].key);
    }
    std::sort(result.unexpected_keys.begin(), result.unexpected_keys.end());
    result.unexpected_keys.erase(
        std::unique(result.unexpected_keys.begin(), result.unexpected_keys.end()),
        result.unexpected_keys.end());
    s = RequestsError("checkpoint '" + dir + "'", gathered->missing, options.allow_missing_keys,
                      result.unexpected_keys, options.allow_unexpected_keys);
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));

  // 3. Reads: planned on every rank, then executed alone or cooperatively.
  Result<LoadPlan> plan = Guarded("load: planning", [&]() -> Result<LoadPlan> {
    SP_ASSIGN_OR_RETURN(std::vector<Region> regions, BuildRegions(state.tensors));
    return PlanLoad(m, regions, options.allow_shape_mismatch);
  });
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, plan.status()));
  for (const View& v : plan->zero_fill) ZeroFill(v);
  ThreadPool pool(std::max(1, options.io_threads));
  DataFiles files(storage, dir, &m);
  ReadOptions read_options;
  read_options.verify_checksums = options.verify_checksums && !dcp;
  read_options.staging_bytes = static_cast<size_t>(std::max<uint64_t>(1, options.read_slice_bytes));
  read_options.gap_bytes = options.read_gap_bytes;
  if (options.cooperative && comm.size() > 1) {
    CooperativeStats coop;
    SP_RETURN_IF_ERROR(CooperativeLoad(m, *plan, comm, &files, &pool, read_options,
                                       options.cooperative_round_bytes, &coop));
    result.bytes_read = coop.bytes_read;
    result.bytes_received = coop.bytes_received;
    result.requests = coop.requests;
    result.bytes_needed = coop.bytes_needed;
    s = OkStatus();
  } else {
    ReadStats read;
    s = Guarded("load: reading",
                [&] { return ExecuteLoadPlan(m, *plan, &files, &pool, read_options, &read); });
    result.bytes_read = read.bytes.load();
    result.requests = read.requests.load();
    result.bytes_needed = read.needed.load();
  }
  if (s.ok()) {
    uint64_t object_bytes = 0;
    s = Guarded("load: reading objects", [&] {
      return LoadObjects(m, state, &files, /*verify=*/!dcp, &object_bytes, &result.requests);
    });
    result.bytes_read += object_bytes;
    result.bytes_needed += object_bytes;
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

// Every local step is Guarded (its exception goes through the agreement that
// follows); this catches what a collective call itself throws.
Result<LoadResult> Load(State& state, const std::string& dir, Comm& comm,
                        const LoadOptions& options) {
  return Guarded("load", [&] { return LoadCollective(state, dir, comm, options); });
}

}  // namespace shardpoint
