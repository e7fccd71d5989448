// S3Client's operations: each builds a Request, sends it (s3_http.cc: signed,
// retried) and reads the response.
#include "src/objstore/s3_client.h"

#include <cstdlib>

#include "src/objstore/crypto.h"
#include "src/objstore/s3_request.h"
#include "src/objstore/s3_xml.h"

namespace shardpoint::internal_objstore {
namespace {

std::string Unquote(std::string etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

S3Client::Request NewRequest(const char* op, const char* method, const std::string& bucket,
                             const std::string& key) {
  S3Client::Request r;
  r.op = op;
  r.method = method;
  r.bucket = bucket;
  r.key = key;
  return r;
}

bool Ok(const S3Client::Response& r) { return r.status / 100 == 2; }

Result<uint64_t> ParseSize(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0') {
    return DataLossError(what + ": the server sent size '" + text + "'");
  }
  return static_cast<uint64_t>(v);
}

}  // namespace

Status S3Client::CreateBucket(const std::string& bucket) {
  Request r = NewRequest("CreateBucket", "PUT", bucket, "");
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (Ok(response)) return OkStatus();
  // Ours already: fine (a retried create, or a test reusing its bucket).
  if (response.status == 409 && XmlElement(response.body, "Code") == "BucketAlreadyOwnedByYou") {
    return OkStatus();
  }
  return S3ErrorStatus(r, response);
}

Status S3Client::PutObject(const std::string& bucket, const std::string& key, std::string_view data,
                           bool if_none_match) {
  Request r = NewRequest("PutObject", "PUT", bucket, key);
  r.headers.emplace_back("Content-MD5", Md5Base64(data));
  r.headers.emplace_back("Content-Length", std::to_string(data.size()));
  if (if_none_match) r.headers.emplace_back("If-None-Match", "*");
  r.body = data;
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (Ok(response)) return OkStatus();
  if (response.status == 412 && response.attempts > 1) {
    // An earlier attempt may have created it before its response was lost:
    // then the stored object is these bytes (a single-part ETag is the MD5).
    Result<S3ObjectInfo> head = HeadObject(bucket, key);
    if (head.ok() && head->size == data.size() && head->etag == Md5Hex(data)) return OkStatus();
  }
  return S3ErrorStatus(r, response);
}

Status S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                          size_t n, void* dst) {
  if (n == 0) return OkStatus();
  Request r = NewRequest("GetObject", "GET", bucket, key);
  r.headers.emplace_back("Range",
                         "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1));
  r.dst = static_cast<char*>(dst);
  r.dst_size = n;
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  const std::string range =
      "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) + ")";
  if (response.status == 416) {
    return DataLossError("GetObject " + S3Uri(bucket, key) + " at " + range +
                         ": the object is shorter (HTTP 416)");
  }
  if (!Ok(response)) return S3ErrorStatus(r, response);
  // 200 instead of 206: the server ignored Range and sent from byte 0.
  if (response.status != 206 && offset != 0) {
    return DataLossError("GetObject " + S3Uri(bucket, key) + " at " + range +
                         ": the server ignored the Range header (HTTP " +
                         std::to_string(response.status) + ")");
  }
  if (response.dst_written != n) {
    return DataLossError("GetObject " + S3Uri(bucket, key) + " at " + range + ": got " +
                         std::to_string(response.dst_written) + " bytes (the object is shorter)");
  }
  return OkStatus();
}

// One ranged GET of the first kGetFirstBytes: its Content-Range gives the
// size, so a small object (a manifest, a lease) costs one request; a larger
// one a second GET of the rest, only if the object is still the same
// (If-Match its ETag).
Result<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key) {
  constexpr size_t kGetFirstBytes = size_t{1} << 20;
  std::string data(kGetFirstBytes, '\0');
  Request r = NewRequest("GetObject", "GET", bucket, key);
  r.headers.emplace_back("Range", "bytes=0-" + std::to_string(kGetFirstBytes - 1));
  r.dst = data.data();
  r.dst_size = data.size();
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (response.status == 416) return std::string();  // exists (no 404), and is empty
  if (!Ok(response)) return S3ErrorStatus(r, response);
  const std::string what = "GetObject " + S3Uri(bucket, key);
  uint64_t total = response.dst_written;  // 200: the server sent it all
  if (response.status == 206) {
    const std::string& range = response.headers["content-range"];  // "bytes 0-N/TOTAL"
    const size_t slash = range.find('/');
    SP_ASSIGN_OR_RETURN(total, ParseSize(slash == std::string::npos ? "" : range.substr(slash + 1),
                                         what + " (Content-Range '" + range + "')"));
  }
  if (total <= response.dst_written) {
    data.resize(response.dst_written);
    return data;
  }
  const size_t first = response.dst_written;
  data.resize(total);
  Request rest = NewRequest("GetObject", "GET", bucket, key);
  rest.headers.emplace_back("Range",
                            "bytes=" + std::to_string(first) + "-" + std::to_string(total - 1));
  rest.headers.emplace_back("If-Match", response.headers["etag"]);
  rest.dst = data.data() + first;
  rest.dst_size = total - first;
  SP_ASSIGN_OR_RETURN(Response second, Send(rest));
  if (second.status == 412) {
    return FailedPreconditionError(what + ": the object changed while it was read (HTTP 412)");
  }
  if (!Ok(second)) return S3ErrorStatus(rest, second);
  if (second.dst_written != total - first) {
    return DataLossError(what + ": got " + std::to_string(first + second.dst_written) + " of " +
                         std::to_string(total) + " bytes");
  }
  return data;
}

Result<S3ObjectInfo> S3Client::HeadObject(const std::string& bucket, const std::string& key) {
  Request r = NewRequest("HeadObject", "HEAD", bucket, key);
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (!Ok(response)) return S3ErrorStatus(r, response);
  S3ObjectInfo info;
  info.key = key;
  info.etag = Unquote(response.headers["etag"]);
  SP_ASSIGN_OR_RETURN(
      info.size, ParseSize(response.headers["content-length"], "HeadObject " + S3Uri(bucket, key)));
  return info;
}

Result<S3Listing> S3Client::List(const std::string& bucket, const std::string& prefix,
                                 const std::string& delimiter, int max_keys) {
  S3Listing listing;
  std::string token;
  do {
    Request r = NewRequest("ListObjectsV2", "GET", bucket, "");
    r.query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(max_keys)}};
    if (!delimiter.empty()) r.query.emplace_back("delimiter", delimiter);
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    SP_ASSIGN_OR_RETURN(Response response, Send(r));
    if (!Ok(response)) return S3ErrorStatus(r, response);
    for (const std::string& c : XmlElements(response.body, "Contents")) {
      S3ObjectInfo info;
      info.key = XmlElement(c, "Key");
      info.etag = Unquote(XmlElement(c, "ETag"));
      SP_ASSIGN_OR_RETURN(
          info.size, ParseSize(XmlElement(c, "Size"), "ListObjectsV2 " + S3Uri(bucket, info.key)));
      listing.objects.push_back(std::move(info));
    }
    for (const std::string& p : XmlElements(response.body, "CommonPrefixes")) {
      listing.common_prefixes.push_back(XmlElement(p, "Prefix"));
    }
    token = XmlElement(response.body, "IsTruncated") == "true"
                ? XmlElement(response.body, "NextContinuationToken")
                : "";
  } while (!token.empty());
  return listing;
}

Result<std::vector<S3OpenUpload>> S3Client::ListMultipartUploads(const std::string& bucket,
                                                                 const std::string& prefix,
                                                                 int max_uploads) {
  std::vector<S3OpenUpload> uploads;
  std::string key_marker, id_marker;
  bool truncated = false;
  do {
    Request r = NewRequest("ListMultipartUploads", "GET", bucket, "");
    r.query = {{"uploads", ""}, {"prefix", prefix}, {"max-uploads", std::to_string(max_uploads)}};
    if (!key_marker.empty()) r.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) r.query.emplace_back("upload-id-marker", id_marker);
    SP_ASSIGN_OR_RETURN(Response response, Send(r));
    if (!Ok(response)) return S3ErrorStatus(r, response);
    for (const std::string& u : XmlElements(response.body, "Upload")) {
      uploads.push_back({XmlElement(u, "Key"), XmlElement(u, "UploadId")});
    }
    truncated = XmlElement(response.body, "IsTruncated") == "true";
    std::string next_key = XmlElement(response.body, "NextKeyMarker");
    std::string next_id = XmlElement(response.body, "NextUploadIdMarker");
    if (truncated && next_key == key_marker && next_id == id_marker) {
      return DataLossError("ListMultipartUploads " + S3Uri(bucket, prefix) +
                           ": a truncated page without a new marker");
    }
    key_marker = std::move(next_key);
    id_marker = std::move(next_id);
  } while (truncated);
  return uploads;
}

Status S3Client::DeleteObject(const std::string& bucket, const std::string& key) {
  Request r = NewRequest("DeleteObject", "DELETE", bucket, key);
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (Ok(response) || response.status == 404) return OkStatus();
  return S3ErrorStatus(r, response);
}

Result<std::string> S3Client::CreateMultipartUpload(const std::string& bucket,
                                                    const std::string& key) {
  Request r = NewRequest("CreateMultipartUpload", "POST", bucket, key);
  r.query = {{"uploads", ""}};
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (!Ok(response)) return S3ErrorStatus(r, response);
  std::string id = XmlElement(response.body, "UploadId");
  if (id.empty()) {
    return DataLossError("CreateMultipartUpload " + S3Uri(bucket, key) +
                         ": the response has no UploadId");
  }
  return id;
}

Result<std::string> S3Client::UploadPart(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id, int part_number,
                                         std::string_view data) {
  Request r = NewRequest("UploadPart", "PUT", bucket, key);
  r.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}};
  r.headers.emplace_back("Content-MD5", Md5Base64(data));
  r.headers.emplace_back("Content-Length", std::to_string(data.size()));
  r.body = data;
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (!Ok(response)) {
    Status s = S3ErrorStatus(r, response);
    return Status(s.code(), s.message() + " (part " + std::to_string(part_number) + ")");
  }
  return Unquote(response.headers["etag"]);
}

Status S3Client::CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id,
                                         const std::vector<std::string>& etags) {
  Request r = NewRequest("CompleteMultipartUpload", "POST", bucket, key);
  r.query = {{"uploadId", upload_id}};
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>\"" +
           XmlEscape(etags[i]) + "\"</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  r.body = xml;
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  // S3 may answer 200 with an <Error> body when the completion fails late.
  if (Ok(response) && XmlElement(response.body, "Code").empty()) return OkStatus();
  if (Ok(response)) response.status = 500;
  if (response.status == 404 && response.attempts > 1) {
    // NoSuchUpload after a retry: the first attempt completed it.
    if (HeadObject(bucket, key).ok()) return OkStatus();
  }
  return S3ErrorStatus(r, response);
}

Status S3Client::AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                      const std::string& upload_id) {
  Request r = NewRequest("AbortMultipartUpload", "DELETE", bucket, key);
  r.query = {{"uploadId", upload_id}};
  SP_ASSIGN_OR_RETURN(Response response, Send(r));
  if (Ok(response) || response.status == 404) return OkStatus();
  return S3ErrorStatus(r, response);
}

}  // namespace shardpoint::internal_objstore
