// Collectives that carry each rank's status with its payload, so that a step
// and the agreement on its outcome cost one collective instead of two.
//
// Each rank sends one status byte (0 = OK, else its code) and then its payload
// or, on error, its message. The agreed status is OK if every sender was OK,
// else the lowest failing rank's error prefixed "rank R: " (AgreeOnStatus's
// rule: AgreeOnStatus is AllGatherAgreed with no payload). A failure of the
// exchange itself is returned as is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint::internal_comm {

// Every rank returns the agreed status; when OK, all[r] is rank r's payload.
Status AllGatherAgreed(Comm& comm, const Status& local, std::string_view mine,
                       std::vector<std::string>* all);

// An AllToAll that carries the sender's status in its payloads, so that a
// step and the agreement on its outcome cost one collective. Byte 0 of every
// (*send)[r] is reserved for the status (callers pack their payload from
// byte 1; the byte is set here): when `local` is OK the payloads go as they
// are, else each becomes the code byte and message. Every rank returns the
// agreed status; when OK, (*recv)[r] is rank r's payload to this rank with
// the status byte still first (left in place, not moved: skip it).
Status AllToAllAgreed(Comm& comm, const Status& local, std::vector<std::string>* send,
                      std::vector<std::string>* recv);

// AllToAllAgreed's payload rules, for an exchange over caller-owned memory
// (the thread comms' AllToAllViews): what a rank sends to every rank in place
// of its payloads when `local` failed (its code byte and message), and the
// agreed status of the payloads received (OK when every byte 0 is 0).
std::string FailurePayload(const Status& local);
Status AgreedPayloads(const std::vector<std::string_view>& got);

// Only `root` learns the outcome: it returns the agreed status and, when OK,
// all[r] = rank r's payload. Other ranks return OK unless the exchange failed,
// so the root must tell them (BroadcastStatus) before anyone acts on it.
Status GatherAgreed(Comm& comm, const Status& local, std::string_view mine, int root,
                    std::vector<std::string>* all);

// `root`'s status and, when OK, its *data reach every rank: every rank returns
// the root's status prefixed "rank <root>: ", or OK with *data set.
Status BroadcastAgreed(Comm& comm, const Status& root_status, std::string* data, int root);

// `root`'s status reaches every rank unchanged (no prefix: it is typically
// already an agreed status, e.g. from GatherAgreed).
Status BroadcastStatus(Comm& comm, const Status& root_status, int root);

}  // namespace shardpoint::internal_comm
