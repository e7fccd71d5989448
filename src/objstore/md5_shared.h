// MD5 for the S3 client's Content-MD5 headers, shared by every thread of the
// process: concurrent calls (the parts of every upload in flight, of every
// rank in the process) are hashed together in Md5Lanes' 8 lanes, where 8
// messages cost a core about what 2 cost it one by one (2.07 against 0.56
// GB/s per core here, bench/md5_bench.cc). The calling threads take turns
// running the lanes (flat combining: no thread of its own); one set of lanes
// runs per 8 calls in progress, at most one per hardware thread; one or two
// calls at once hash alone, in parallel (OpenSSL). SHARDPOINT_MD5_LANES=0 in
// the environment (read once) makes every call hash alone: for comparisons.
#pragma once

#include <cstdint>

namespace shardpoint::internal_objstore {

// The 16-byte MD5 of data; thread-safe; blocks until it is computed.
void SharedMd5(const void* data, uint64_t size, unsigned char digest[16]);

}  // namespace shardpoint::internal_objstore
