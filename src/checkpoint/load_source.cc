#include "src/checkpoint/load_source.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "src/base/guard.h"
#include "src/checkpoint/cooperative.h"
#include "src/checkpoint/direct_choice.h"
#include "src/checkpoint/exchange_choice.h"
#include "src/checkpoint/reader.h"
#include "src/checkpoint/requests.h"
#include "src/comm/transport.h"
#include "src/geometry/view.h"
#include "src/io/read_size.h"
#include "src/plan/load_plan.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::StridedCopy;
using shardpoint::internal_geometry::View;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::PlanLoad;
using shardpoint::internal_plan::Region;
using shardpoint::internal_source::ChunkEncoding;
using shardpoint::internal_source::Source;

namespace shardpoint::internal_checkpoint {
namespace {

const ObjectRecord* FindObject(const Manifest& m, const Object& o) {
  auto it = std::lower_bound(m.objects.begin(), m.objects.end(), o,
                             [](const ObjectRecord& r, const Object& q) {
                               return std::tie(r.key, r.index) < std::tie(q.key, q.index);
                             });
  if (it == m.objects.end() || it->key != o.key || it->index != o.index) return nullptr;
  return &*it;
}

// LoadOptions::tensor_groups fits the state.
Status CheckGroups(const State& state, const LoadOptions& options) {
  const std::vector<int>& g = options.tensor_groups;
  if (g.empty()) return OkStatus();
  if (g.size() != state.tensors.size()) {
    return InvalidArgumentError("tensor_groups has " + std::to_string(g.size()) +
                                " entries for a state of " + std::to_string(state.tensors.size()) +
                                " tensors");
  }
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] < 0) {
      return InvalidArgumentError("tensor_groups[" + std::to_string(i) +
                                  "] is negative: " + std::to_string(g[i]));
    }
  }
  return OkStatus();
}

// Groups 0 to the largest of LoadOptions::tensor_groups (0 when it is empty).
int GroupCount(const LoadOptions& options) {
  const std::vector<int>& g = options.tensor_groups;
  return g.empty() ? 0 : *std::max_element(g.begin(), g.end()) + 1;
}

// Reads the plan group by group (LoadOptions::tensor_groups), announcing
// each group once its pieces are placed; the whole plan at once without groups.
Status ExecuteByGroup(const Manifest& m, const LoadPlan& plan, const LoadOptions& options,
                      DataFiles* files, ThreadPool* pool, const ReadOptions& read_options,
                      ReadStats* stats) {
  const std::vector<int>& groups = options.tensor_groups;
  if (groups.empty()) return ExecuteLoadPlan(m, plan, files, pool, read_options, stats);
  std::vector<LoadPlan> parts(GroupCount(options));
  for (const internal_plan::ReadPiece& p : plan.pieces) {  // keeps the plan's file order
    LoadPlan& part = parts[groups[p.local]];
    part.bytes += p.nbytes;
    part.pieces.push_back(p);
  }
  for (size_t g = 0; g < parts.size(); ++g) {
    SP_RETURN_IF_ERROR(ExecuteLoadPlan(m, parts[g], files, pool, read_options, stats));
    if (options.on_group_loaded) options.on_group_loaded(static_cast<int>(g));
  }
  return OkStatus();
}

// The source's object keys, sorted, unique: what the requests number
// objects by (every rank the same, whichever objects it fetched).
std::vector<std::string> ObjectKeys(const Source& src) {
  if (!src.object_keys.empty()) return src.object_keys;
  std::vector<std::string> out;
  for (const ObjectRecord& o : src.index.objects) {
    if (out.empty() || out.back() != o.key) out.push_back(o.key);
  }
  return out;
}

// The source's number of tensors (more than index.tensors holds where it
// holds only this rank's: Source::tensor_numbers).
uint64_t TensorCount(const Source& src) {
  return src.partial_tensors ? src.tensor_count : src.index.tensors.size();
}

// Stored key `i` (tensors first, then `object_keys`), where this rank owns
// it in the request check.
std::string StoredKeyName(const Source& src, const std::vector<std::string>& object_keys,
                          uint64_t i) {
  const uint64_t tensors = TensorCount(src);
  if (i >= tensors) return object_keys[i - tensors];
  if (!src.partial_tensors) return src.index.tensors[i].key;
  auto it = std::lower_bound(
      src.owned_tensor_keys.begin(), src.owned_tensor_keys.end(), i,
      [](const std::pair<uint64_t, std::string>& o, uint64_t n) { return o.first < n; });
  return it != src.owned_tensor_keys.end() && it->first == i
             ? it->second
             : "<tensor " + std::to_string(i) + ">";  // not this rank's to name
}

// Checks this rank's requests against the index; puts the numbers of the
// requested tensors and object keys (`object_keys`) in `wanted` (tensors
// first, numbered up to TensorCount, then objects).
Status CheckRequests(const Source& src, const State& state, const LoadOptions& options,
                     const std::vector<std::string>& object_keys, std::vector<std::string>* missing,
                     std::vector<uint64_t>* wanted) {
  const Manifest& m = src.index;
  for (const LocalTensor& lt : state.tensors) {
    for (const Segment& seg : lt.segments) {
      int64_t t = m.FindTensor(seg.key);
      if (t < 0) {
        missing->push_back(seg.key);
        continue;
      }
      wanted->push_back(src.partial_tensors ? src.tensor_numbers[t] : t);
      const TensorRecord& rec = m.tensors[t];
      if (rec.dtype != lt.dtype && !options.allow_dtype_conversion) {
        return InvalidArgumentError("tensor '" + seg.key + "': requested dtype " +
                                    std::string(DTypeName(lt.dtype)) + " but the " + src.kind +
                                    " holds " + std::string(DTypeName(rec.dtype)) +
                                    " (allow_dtype_conversion converts)");
      }
      const bool shape_ok =
          rec.shape == seg.global_shape ||
          (options.allow_shape_mismatch && rec.shape.size() == seg.global_shape.size());
      if (!shape_ok) {
        return InvalidArgumentError("tensor '" + seg.key + "': requested global shape " +
                                    ShapeToString(seg.global_shape) + " but the " + src.kind +
                                    " holds " + ShapeToString(rec.shape) +
                                    (rec.shape.size() == seg.global_shape.size()
                                         ? " (allow_shape_mismatch loads the overlap)"
                                         : ""));
      }
    }
  }
  for (const Object& o : state.objects) {
    const std::string name = o.index.empty() ? o.key : o.key + ShapeToString(o.index);
    if (!src.has_objects) {
      missing->push_back(name + " (objects are not in " + src.kind + "s)");
      continue;
    }
    if (!FindObject(m, o)) {
      missing->push_back(name);
      continue;
    }
    auto k = std::lower_bound(object_keys.begin(), object_keys.end(), o.key);
    wanted->push_back(TensorCount(src) + (k - object_keys.begin()));
  }
  if (src.has_objects && state.common && !m.has_common && !options.common_optional) {
    missing->push_back("<common>");
  }
  SortUnique(missing);
  return OkStatus();
}

Status LoadObjects(const Source& src, State& state, DataFiles* files, bool verify, uint64_t* bytes,
                   uint64_t* requests) {
  if (!src.has_objects) return OkStatus();
  const Manifest& m = src.index;
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
    if (verify) {
      SP_RETURN_IF_ERROR(
          ReadVerified(files, m, r->file, r->offset, r->nbytes, r->checksum, what, o.bytes.data()));
    } else {
      Status read = file->ReadAt(r->offset, r->nbytes, o.bytes.data());
      if (!read.ok()) return read.WithContext(what);
    }
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
// the source does not hold).
void ZeroFill(const View& v) {
  const std::vector<char> zero(v.elem_size, 0);
  StridedCopy(v,
              View{const_cast<char*>(zero.data()), v.elem_size, v.shape, Shape(v.shape.size(), 0)});
}

}  // namespace

Result<LoadResult> LoadFromSource(State& state, const Status& index_status, const Source& src,
                                  Comm& comm, const LoadOptions& options, CallResources& res,
                                  const std::string& what, const ExecutePlan& execute) {
  Storage* storage = res.storage();
  const Manifest& m = src.index;

  // 1 and 2. Requests. Missing keys travel with the bitmaps, so that a strict
  // load names every rank's missing keys and the unexpected ones in one error.
  LoadResult result;
  std::vector<uint64_t> wanted;
  Status s = index_status;
  if (s.ok()) s = CheckGroups(state, options);
  const std::vector<std::string> object_keys = ObjectKeys(src);
  if (s.ok()) {
    s = Guarded(what + ": checking the requests", [&] {
      return CheckRequests(src, state, options, object_keys, &result.missing_keys, &wanted);
    });
  }
  Result<GatheredRequests> gathered =
      GatherRequests(comm, s, TensorCount(src) + object_keys.size(), wanted, result.missing_keys,
                     [&](uint64_t i) { return StoredKeyName(src, object_keys, i); });
  SP_RETURN_IF_ERROR(gathered.status());
  result.unexpected_keys = std::move(gathered->unrequested);

  // 3. Reads: planned on every rank (after the requests' verdict, which every
  // rank computes from the same bytes), then executed alone or cooperatively.
  s = RequestsError(src.name, gathered->missing, options.allow_missing_keys, result.unexpected_keys,
                    options.allow_unexpected_keys);
  Result<LoadPlan> plan =
      !s.ok() ? Result<LoadPlan>(s) : Guarded(what + ": planning", [&]() -> Result<LoadPlan> {
        if (src.encoding != ChunkEncoding::kRawLittleEndian) {
          return InternalError(src.name + ": chunk encoding not supported by the load pipeline");
        }
        SP_ASSIGN_OR_RETURN(std::vector<Region> regions, BuildRegions(state.tensors));
        return PlanLoad(m, regions, options.allow_shape_mismatch);
      });
  bool cooperative = !execute && options.cooperative && comm.size() > 1 && !src.own_records_only;
  // A cooperative load, and `execute`, exchange blocks: every rank must be in
  // it. Reading alone, a rank whose plan failed skips its reads, and the
  // error goes into the final agreement.
  if (cooperative || execute) SP_RETURN_IF_ERROR(AgreeOnStatus(comm, plan.status()));
  // Over a Comm of Python's, only where reading alone would read more than
  // the needed bytes (src/checkpoint/exchange_choice.h).
  if (cooperative && internal_comm::WantsShmExchange(comm)) {
    SP_ASSIGN_OR_RETURN(
        cooperative,
        ExchangeSavesReads(comm, m, *plan, options.verify_checksums && src.has_checksums));
  }
  s = plan.status();
  if (s.ok()) {
    for (const View& v : plan->zero_fill) ZeroFill(v);
  }
  ThreadPool* pool = res.pool();
  const bool direct =
      s.ok() && UseDirectReads(options.direct_io, comm.size() > 1 && !cooperative, m, *plan);
  DataFiles files(storage, src.dir, &m, &src.views, direct);
  ReadOptions read_options;
  read_options.verify_checksums = options.verify_checksums && src.has_checksums;
  // An object store's GET costs a round trip: it raises the slice toward its
  // preferred request size, keeping every I/O thread busy with this rank's
  // bytes (src/io/read_size.h; the same on every rank of a cooperative load
  // that needs the same bytes, and where they differ each reads alone).
  uint64_t to_read = 0;
  if (plan.ok()) {
    for (const internal_plan::ReadPiece& p : plan->pieces) to_read += p.nbytes;
  }
  read_options.read_slice_bytes = static_cast<size_t>(
      internal_io::ReadSliceFor(storage, src.dir, std::max<uint64_t>(1, options.read_slice_bytes),
                                to_read, pool != nullptr ? pool->num_threads() : 1));
  read_options.prefetch_bytes = options.prefetch_bytes;
  read_options.read_gap_bytes = options.read_gap_bytes;
  // Strided view files: a bridged gap would be elements scattered over the
  // storage, widening the span the view reads (src/dcp/strided_file.h).
  std::vector<bool> views(m.files.size(), false);
  for (const internal_dcp::StridedView& v : src.views) {
    if (v.file < views.size()) views[v.file] = true;
  }
  if (!src.views.empty()) read_options.unbridged_files = &views;
  if (s.ok() && execute) {
    ReadStats read;
    s = execute(*plan, &files, pool, read_options, &read);
    for (int g = 0; s.ok() && g < GroupCount(options); ++g) {
      if (options.on_group_loaded) {
        s = Guarded(what + ": announcing tensor group " + std::to_string(g), [&] {
          options.on_group_loaded(g);
          return OkStatus();
        });
      }
    }
    result.bytes_read = read.bytes.load();
    result.requests = read.requests.load();
    result.bytes_needed = read.needed.load();
  } else if (s.ok() && cooperative) {
    // CooperativeLoad agrees on its own errors: every rank returns the same.
    // A failing announcement is this rank's error, agreed on at the end: it
    // must not leave the rounds' collectives.
    LoadGroups groups;
    groups.count = options.on_group_loaded ? GroupCount(options) : 0;
    if (groups.count > 0) {
      for (const internal_plan::ReadPiece& p : plan->pieces) {
        groups.of_piece.push_back(options.tensor_groups[p.local]);
      }
    }
    groups.announce = [&](int g) {
      if (s.ok()) {
        s = Guarded(what + ": announcing tensor group " + std::to_string(g), [&] {
          options.on_group_loaded(g);
          return OkStatus();
        });
      }
    };
    CooperativeStats coop;
    SP_RETURN_IF_ERROR(CooperativeLoad(m, *plan, comm, &files, pool, read_options,
                                       options.cooperative_round_bytes, groups, &coop));
    result.bytes_read = coop.bytes_read;
    result.bytes_received = coop.bytes_received;
    result.requests = coop.requests;
    result.bytes_needed = coop.bytes_needed;
  } else if (s.ok()) {
    ReadStats read;
    s = Guarded(what + ": reading", [&] {
      return ExecuteByGroup(m, *plan, options, &files, pool, read_options, &read);
    });
    result.bytes_read = read.bytes.load();
    result.requests = read.requests.load();
    result.bytes_needed = read.needed.load();
  }
  if (s.ok()) {
    uint64_t object_bytes = 0;
    s = Guarded(what + ": reading objects", [&] {
      return LoadObjects(src, state, &files, src.has_checksums, &object_bytes, &result.requests);
    });
    result.bytes_read += object_bytes;
    result.bytes_needed += object_bytes;
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  return result;
}

void LogLoadOutcome(const CallResources& res, const Comm& comm, const std::string& name,
                    const Result<LoadResult>& result) {
  if (comm.rank() != 0) return;
  if (!result.ok()) {
    res.Log("shardpoint: load of " + name + " FAILED: " + result.status().ToString());
    return;
  }
  const LoadResult& r = *result;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.3f GB read by rank 0 in %.3f s", r.bytes_read / 1e9, r.seconds);
  std::string line = "shardpoint: loaded " + name + ": " + buf;
  if (!r.missing_keys.empty()) line += "; " + std::to_string(r.missing_keys.size()) + " missing";
  if (!r.unexpected_keys.empty()) {
    line += "; " + std::to_string(r.unexpected_keys.size()) + " unexpected";
  }
  res.Log(line);
}

}  // namespace shardpoint::internal_checkpoint
