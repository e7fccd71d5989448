// A source: the index of stored chunks that a load reads, whatever wrote them.
//
// Every kind of checkpoint the load pipeline (src/checkpoint/load_source.h)
// reads is first turned into a Source:
//   * a shardpoint checkpoint: its manifest, as is;
//   * a PyTorch DCP directory: the index src/dcp/ builds from `.metadata`,
//     chunks pointing at raw tensor bytes inside the .distcp files, no
//     checksums (src/dcp/dcp_dir.h);
//     both opened by src/source/open_source.h, which Load, describe, verify
//     and OpenSource use;
//   * an HF model directory under a mapping: one chunk per piece of an HF
//     tensor, pointing at its byte range in a .safetensors file, no checksums
//     (src/source/mapped_source.h, which LoadFromHf, DescribeHf and the
//     converters use).
// Those headers are the door: no other module decides what a directory is.
// The producer validates what it read (bounds, overflow, names) before it
// builds the index; the pipeline then treats every source alike: request
// checks, unexpected keys, plan, reads (alone or cooperative), zero fill,
// objects.
//
// The index reuses the manifest's records (src/format/manifest.h):
//   tensors   key, dtype, global shape; sorted by key, keys unique
//   chunks    box in the global tensor, file (index into `files`), absolute
//             byte range [offset, offset + nbytes) in that file, checksum
//             and block checksums; sorted by box, disjoint, tiling the tensor
//   files     names relative to `dir`, opened through the load's Storage
//   objects, common, metadata_json   shardpoint checkpoints (DCP: byte items)
//   views     files of the index that are strided views of another file
//             (src/dcp/strided_file.h: DCP tensor items stored with
//             strides); their chunks are row-major like every other chunk
// A Source is a plain value: built once per rank (from bytes every rank
// agreed on), then only read, from any number of threads.
#pragma once

#include <string>
#include <vector>

#include "shardpoint/checkpoint_kind.h"
#include "src/dcp/dcp_dir.h"
#include "src/dcp/strided_file.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_source {

// How a chunk's bytes encode its elements.
enum class ChunkEncoding {
  // The row-major elements of the chunk's box in the tensor's dtype,
  // little-endian, nothing else (shardpoint, safetensors, DCP raw storages).
  kRawLittleEndian,
};

struct Source {
  std::string dir;  // the files are relative to it
  // What the directory is, decided once when it was opened
  // (DetectCheckpointKind; src/source/open_source.h, mapped_source.h).
  CheckpointKind checkpoint_kind = CheckpointKind::kShardpoint;
  std::string kind;  // "checkpoint", "HF model": "requested dtype X but the <kind> holds Y"
  std::string name;  // errors name the source so: "checkpoint 'x'", "HF model 'x' (mapping 'm')"
  internal_format::Manifest index;
  // Every object key of the checkpoint, sorted, where `index.objects` holds
  // only the objects this rank fetched (a sharded manifest, Load); empty:
  // those of `index.objects`. The load numbers objects by key (ObjectKeys).
  std::vector<std::string> object_keys;
  // Where `index.tensors` holds only this rank's tensors (a sharded
  // manifest's loading rank, Load): the checkpoint's number of tensors, the
  // number of each held one among them (key order), and the (number, key)
  // of each tensor whose number is this rank mod the ranks (what it names in
  // the request check, src/checkpoint/requests.h). Where `partial_tensors`
  // is false, `index.tensors` is every tensor (and these are unused).
  bool partial_tensors = false;
  uint64_t tensor_count = 0;
  std::vector<uint64_t> tensor_numbers;
  std::vector<std::pair<uint64_t, std::string>> owned_tensor_keys;
  // `index` holds only the records this rank reads (a sharded manifest's
  // loading rank, Load): the load reads alone, whatever LoadOptions::cooperative
  // says (an exchange plans every rank's pieces on every rank).
  bool own_records_only = false;
  // The chunks' (and objects') checksum fields hold checksums of their bytes.
  // False: there is nothing to verify (HF, DCP); the fields are 0.
  bool has_checksums = true;
  // The source kind can hold objects, a common blob and user metadata. False:
  // every requested object is a missing key, and State::common and
  // State::metadata_json are left as they are.
  bool has_objects = true;
  ChunkEncoding encoding = ChunkEncoding::kRawLittleEndian;
  // Files of `index` read as strided views of another of its files (DCP).
  std::vector<internal_dcp::StridedView> views;
  // PyTorch DCP opened in one process (OpenCheckpointSource): the zip entry
  // of every tensor chunk, with the CRC-32 torch.save recorded, for verify.
  // Not part of the broadcast bytes (Load does not need them).
  std::vector<internal_dcp::DcpCheckedEntry> dcp_entries;
};

}  // namespace shardpoint::internal_source
