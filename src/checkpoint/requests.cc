#include "src/checkpoint/requests.h"

#include <algorithm>

#include "src/base/bytes.h"
#include "src/comm/agreed.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_comm::AllGatherAgreed;

namespace shardpoint::internal_checkpoint {

Result<GatheredRequests> GatherRequests(Comm& comm, const Status& local, const std::string& wanted,
                                        const std::vector<std::string>& missing) {
  ByteWriter w;
  w.U64(missing.size());
  for (const std::string& k : missing) w.Str(k);
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(AllGatherAgreed(comm, local, wanted + w.str(), &all));
  GatheredRequests out;
  std::vector<bool> any(wanted.size(), false);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() < wanted.size()) {
      return InternalError("rank " + std::to_string(r) + " sent " + std::to_string(all[r].size()) +
                           " bytes of requests, expected at least " +
                           std::to_string(wanted.size()));
    }
    for (size_t i = 0; i < wanted.size(); ++i) any[i] = any[i] || all[r][i] != 0;
    ByteReader rd(std::string_view(all[r]).substr(wanted.size()),
                  "missing keys from rank " + std::to_string(r));
    uint64_t n;
    SP_RETURN_IF_ERROR(rd.Count(&n, 4));
    for (uint64_t k = 0; k < n; ++k) {
      std::string key;
      SP_RETURN_IF_ERROR(rd.Str(&key));
      out.missing.push_back(std::move(key));
    }
  }
  std::sort(out.missing.begin(), out.missing.end());
  out.missing.erase(std::unique(out.missing.begin(), out.missing.end()), out.missing.end());
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (!any[i]) out.unrequested.push_back(i);
  }
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
