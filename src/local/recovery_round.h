// Step 4 of a recovery (local_load.cc), one round of the exchange: each
// server adds its transfers to the round's messages (Serve), one AllToAll
// moves them (ExchangeRound: between thread ranks as views of the senders'
// memory, else gathered into buffers), and each receiver checks and places
// what arrived (Receive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardpoint/status.h"
#include "src/local/recover_plan.h"
#include "src/local/recovery.h"

namespace shardpoint::internal_local {

// Step 4, one transfer served by this rank: adds it to the round's messages,
// keeps what this rank itself receives, notes a bad copy. The unit's bytes
// are the node copy's mapping where there is one (each receiver checks
// them), else read once into the round's buffer and checked here; every
// receiver's message views the same bytes.
Status Serve(Recovery& x, const Transfer& tr, FileCache& node_files, FileCache& pers_files,
             std::vector<std::pair<int, uint32_t>>* newly_bad);

// Step 4, what this rank received in a round: each unit checked where it
// arrived (the sender's memory, or the receive buffer reused by every
// round), then placed from there a few MiB at a time (still in the cache).
Status Receive(Recovery& x, const std::vector<std::vector<std::string_view>>& recv,
               std::vector<std::pair<int, uint32_t>>* newly_bad);

// One round's AllToAll of x.out; `take` runs on what this rank received.
// Thread ranks (the thread comms' ViewAllToAll) read the pieces in place,
// in the senders' memory, valid only while `take` runs: the lost bytes are
// not copied by the Comm. Other Comms send each message gathered into one
// buffer of *send and receive into *recv, both reused by every round.
Status ExchangeRound(
    Recovery& x, std::vector<std::string>* send, std::vector<std::string>* recv,
    const std::function<void(const std::vector<std::vector<std::string_view>>&)>& take);

// Whether transfer tr's server sends the unit from its mapping of its node's
// file (the maps all-gathered with the needs): no round buffer holds it.
bool SentFromMapping(const Recovery& x, const Transfer& tr);

// Before this rank serves its part of a round: room for its headers and for
// the units it reads (those not in a mapping), so that the round's views
// never move; the messages emptied.
void Reserve(Recovery& x, const std::vector<Transfer>& transfers, const std::vector<size_t>& round);

}  // namespace shardpoint::internal_local
