#include "src/checkpoint/requests.h"

#include <algorithm>

#include "src/base/bytes.h"
#include "src/comm/agreed.h"
#include "src/format/checksum.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_comm::AllGatherAgreed;
using shardpoint::internal_comm::AllToAllAgreed;

namespace shardpoint::internal_checkpoint {
void SortUnique(std::vector<std::string>* keys) {
  std::sort(keys->begin(), keys->end());
  keys->erase(std::unique(keys->begin(), keys->end()), keys->end());
}

namespace {

// The rank that owns a missing key's name (the same on every rank).
size_t MissingOwner(const std::string& key, int n) {
  return internal_format::Checksum64(key.data(), key.size()) % static_cast<uint64_t>(n);
}

void PutNames(ByteWriter& w, const std::vector<std::string>& names) {
  w.U64(names.size());
  for (const std::string& k : names) w.Str(k);
}

Status GetNames(ByteReader& in, std::vector<std::string>* out) {
  uint64_t k;
  SP_RETURN_IF_ERROR(in.Count(&k, 4));
  for (uint64_t i = 0; i < k; ++i) {
    SP_RETURN_IF_ERROR(in.Str(&out->emplace_back()));
  }
  return OkStatus();
}

// Step 1 at an owner: marks in `asked` (one flag per key it owns, key
// j * n + rank at j) the numbers rank `r` sent, and collects its missing keys.
Status TakeAsks(std::string_view msg, int r, int n, int rank, uint64_t count,
                std::vector<char>* asked, std::vector<std::string>* missing) {
  if (msg.size() <= 1) return OkStatus();  // the status byte alone: nothing asked
  ByteReader in(msg.substr(1), "requests from rank " + std::to_string(r));
  uint64_t k;
  SP_RETURN_IF_ERROR(in.Count(&k, 8));
  for (uint64_t i = 0; i < k; ++i) {
    uint64_t key;
    SP_RETURN_IF_ERROR(in.U64(&key));
    if (key >= count || key % n != static_cast<uint64_t>(rank)) {
      return InternalError("rank " + std::to_string(r) + " requested stored key " +
                           std::to_string(key) + " of " + std::to_string(count) + " from rank " +
                           std::to_string(rank) + ", which does not own it");
    }
    (*asked)[key / n] = 1;
  }
  SP_RETURN_IF_ERROR(GetNames(in, missing));
  if (!in.done()) {
    return InternalError("requests from rank " + std::to_string(r) + ": trailing bytes");
  }
  return OkStatus();
}

}  // namespace

Result<GatheredRequests> GatherRequests(Comm& comm, const Status& local, uint64_t count,
                                        const std::vector<uint64_t>& wanted,
                                        const std::vector<std::string>& missing,
                                        const std::function<std::string(uint64_t)>& name_of) {
  const int n = comm.size(), rank = comm.rank();
  // 1. Each owner gets the requests for its keys.
  std::vector<std::vector<uint64_t>> numbers(n);
  std::vector<std::vector<std::string>> names(n);
  for (uint64_t i : wanted) numbers[i % n].push_back(i);
  for (const std::string& k : missing) names[MissingOwner(k, n)].push_back(k);
  std::vector<std::string> send(n), recv;
  for (int r = 0; r < n; ++r) {
    if (numbers[r].empty() && names[r].empty()) continue;
    std::sort(numbers[r].begin(), numbers[r].end());
    numbers[r].erase(std::unique(numbers[r].begin(), numbers[r].end()), numbers[r].end());
    ByteWriter w;
    w.U8(0);  // the status byte (AllToAllAgreed)
    w.U64(numbers[r].size());
    for (uint64_t i : numbers[r]) w.U64(i);
    PutNames(w, names[r]);
    send[r] = std::move(w.str());
  }
  SP_RETURN_IF_ERROR(AllToAllAgreed(comm, local, &send, &recv));

  // 2. Each owner's findings: its keys no rank asked for, and the distinct
  // missing keys it was sent.
  const uint64_t owned = static_cast<uint64_t>(rank) < count ? (count - rank + n - 1) / n : 0;
  std::vector<char> asked(owned, 0);
  std::vector<std::string> found_missing, found_unrequested;
  Status s;
  for (int r = 0; r < n && s.ok(); ++r) {
    s = TakeAsks(recv[r], r, n, rank, count, &asked, &found_missing);
  }
  std::string mine;
  if (s.ok()) {
    SortUnique(&found_missing);
    for (uint64_t j = 0; j < owned; ++j) {
      if (!asked[j]) found_unrequested.push_back(name_of(j * n + rank));
    }
    if (!found_missing.empty() || !found_unrequested.empty()) {
      ByteWriter w;
      PutNames(w, found_unrequested);
      PutNames(w, found_missing);
      mine = std::move(w.str());
    }
  }
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(AllGatherAgreed(comm, s, mine, &all));
  GatheredRequests out;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    ByteReader in(all[r], "request findings from rank " + std::to_string(r));
    SP_RETURN_IF_ERROR(GetNames(in, &out.unrequested));
    SP_RETURN_IF_ERROR(GetNames(in, &out.missing));
  }
  SortUnique(&out.missing);
  SortUnique(&out.unrequested);
  return out;
}

std::string KeyList(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 10; ++i) s += (i ? ", " : "") + ("'" + keys[i] + "'");
  if (keys.size() > 10) s += ", ... (" + std::to_string(keys.size()) + " in all)";
  return s;
}

Status RequestsError(const std::string& source, const std::vector<std::string>& missing,
                     bool allow_missing, const std::vector<std::string>& unexpected,
                     bool allow_unexpected) {
  const bool report_missing = !missing.empty() && !allow_missing;
  const bool report_unexpected = !unexpected.empty() && !allow_unexpected;
  const std::string unexpected_text = "holds keys no rank requested: " + KeyList(unexpected) +
                                      " (allow_unexpected_keys ignores them)";
  if (report_missing) {
    return NotFoundError(source + " lacks requested keys " + KeyList(missing) +
                         " (allow_missing_keys skips them)" +
                         (report_unexpected ? "; it also " + unexpected_text : ""));
  }
  if (report_unexpected) return InvalidArgumentError(source + " " + unexpected_text);
  return OkStatus();
}

}  // namespace shardpoint::internal_checkpoint
