#include "src/comm/agreed.h"

#include <utility>

namespace shardpoint::internal_comm {
namespace {

std::string Encode(const Status& s, std::string_view payload) {
  std::string out;
  if (s.ok()) {
    out.reserve(1 + payload.size());
    out.push_back('\0');
    out.append(payload);
  } else {
    out.push_back(static_cast<char>(s.code()));
    out.append(s.message());
  }
  return out;
}

// Rank r's message: OK (and the payload in *payload), or its error. `prefix`
// names the rank. A code byte from a peer is untrusted input: an empty message,
// an unknown code or OK's code with garbage must still come out right.
Status Decode(int r, std::string&& msg, bool prefix, std::string* payload) {
  if (msg.empty()) {
    return InternalError("rank " + std::to_string(r) + ": empty status message");
  }
  const unsigned char c = static_cast<unsigned char>(msg[0]);
  if (c == 0) {
    if (payload) {
      msg.erase(0, 1);
      *payload = std::move(msg);
    }
    return OkStatus();
  }
  std::string text = (prefix ? "rank " + std::to_string(r) + ": " : std::string()) + msg.substr(1);
  if (c > static_cast<unsigned char>(StatusCode::kDeadlineExceeded)) {
    return InternalError(text + " (unknown status code " + std::to_string(c) + ")");
  }
  return Status(static_cast<StatusCode>(c), std::move(text));
}

// The lowest failing rank's status, else OK with the payloads in *all.
Status Agreed(std::vector<std::string>& got, std::vector<std::string>* all) {
  for (size_t r = 0; r < got.size(); ++r) {
    if (!got[r].empty() && got[r][0] == '\0') continue;
    return Decode(static_cast<int>(r), std::move(got[r]), true, nullptr);
  }
  if (all) {
    all->resize(got.size());
    for (size_t r = 0; r < got.size(); ++r) {
      got[r].erase(0, 1);  // the status byte; the payload moves, not copied
      (*all)[r] = std::move(got[r]);
    }
  }
  return OkStatus();
}

}  // namespace

Status AllGatherAgreed(Comm& comm, const Status& local, std::string_view mine,
                       std::vector<std::string>* all) {
  std::vector<std::string> got;
  SP_RETURN_IF_ERROR(comm.AllGather(Encode(local, mine), &got));
  return Agreed(got, all);
}

Status AllToAllAgreed(Comm& comm, const Status& local, std::vector<std::string>* send,
                      std::vector<std::string>* recv) {
  for (std::string& p : *send) {
    if (!local.ok()) {
      p = Encode(local, {});
    } else if (p.empty()) {
      p.push_back('\0');
    } else {
      p[0] = '\0';
    }
  }
  SP_RETURN_IF_ERROR(comm.AllToAll(*send, recv));
  for (size_t r = 0; r < recv->size(); ++r) {
    const std::string& got = (*recv)[r];
    if (!got.empty() && got[0] == '\0') continue;
    return Decode(static_cast<int>(r), std::string(got), true, nullptr);
  }
  return OkStatus();
}

std::string FailurePayload(const Status& local) { return Encode(local, {}); }

Status AgreedPayloads(const std::vector<std::string_view>& got) {
  for (size_t r = 0; r < got.size(); ++r) {
    if (!got[r].empty() && got[r][0] == '\0') continue;
    return Decode(static_cast<int>(r), std::string(got[r]), true, nullptr);
  }
  return OkStatus();
}

Status GatherAgreed(Comm& comm, const Status& local, std::string_view mine, int root,
                    std::vector<std::string>* all) {
  std::vector<std::string> got;
  SP_RETURN_IF_ERROR(comm.Gather(Encode(local, mine), root, &got));
  if (comm.rank() != root) return OkStatus();
  return Agreed(got, all);
}

Status BroadcastAgreed(Comm& comm, const Status& root_status, std::string* data, int root) {
  std::string msg = comm.rank() == root ? Encode(root_status, *data) : std::string();
  SP_RETURN_IF_ERROR(comm.Broadcast(&msg, root));
  return Decode(root, std::move(msg), true, data);
}

Status BroadcastStatus(Comm& comm, const Status& root_status, int root) {
  std::string msg = comm.rank() == root ? Encode(root_status, {}) : std::string();
  SP_RETURN_IF_ERROR(comm.Broadcast(&msg, root));
  return Decode(root, std::move(msg), false, nullptr);
}

}  // namespace shardpoint::internal_comm
