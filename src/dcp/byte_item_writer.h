// The DCP byte item of a stored object: bytes that DCP's loader (which
// torch.load()s every byte item: torch 1.13 and 2.x `load_bytes`) turns back
// into the value the object holds.
//
// A shardpoint object in the Python package's encoding
// (python/shardpoint/_objects.py: a one-byte tag, then the value) becomes:
//   'J' + JSON   the Python value json.loads gives (None, bool, int of any
//                size, float with NaN and infinities, str, list, dict),
//                pickled through the restricted pickle writer
//                (src/dcp/pickle_writer.h, protocol 2, as torch.save);
//   'B' + bytes  a Python bytes object (pickled as torch.save does);
//   'P' + pickle that pickle, as stored (the value pickle.loads gives);
// any other object (no such tag: written by C++ `Object`, or empty) becomes
// a Python bytes object of its stored bytes. Each is wrapped in a
// torch.save archive (archive/data.pkl and archive/version, as torch 1.13
// writes one), since torch.load refuses a bare pickle. A byte item of a
// DCP source is a torch.save archive already and is kept as stored.
//
// Refused (FailedPrecondition naming the key): a 'J' object whose text is
// not what json.loads reads (not UTF-8, not JSON, nested deeper than 512,
// a lone UTF-16 surrogate escape, an integer of more than 4300 digits),
// an object over 1 GiB.
#pragma once

#include <string>
#include <string_view>

#include "shardpoint/status.h"

namespace shardpoint::internal_dcp {

enum class ObjectSource {
  kShardpoint,  // a shardpoint checkpoint's object
  kDcp,         // a DCP byte item (a torch.save archive)
};

Result<std::string> EncodeDcpByteItem(std::string_view stored, ObjectSource source,
                                      const std::string& key);

// The parts, for tests: the pickle of the JSON text's value (InvalidArgument
// saying what is wrong where), and a torch.save archive around a data.pkl.
Result<std::string> PickleJson(std::string_view json);
std::string TorchSaveArchive(std::string_view data_pkl);

}  // namespace shardpoint::internal_dcp
