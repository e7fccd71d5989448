#include "src/objstore/s3_request.h"

#include "src/objstore/s3_xml.h"

namespace shardpoint::internal_objstore {

std::string S3Uri(const std::string& bucket, const std::string& key) {
  return "s3://" + bucket + (key.empty() ? "" : "/" + key);
}

Status S3ErrorStatus(const S3Client::Request& request, const S3Client::Response& response) {
  const std::string what = request.op + " " + S3Uri(request.bucket, request.key);
  const std::string tries =
      response.attempts > 1 ? " (after " + std::to_string(response.attempts) + " attempts)" : "";
  if (response.status == 0 && response.curl == CURLE_PEER_FAILED_VERIFICATION) {
    // Not the network: the endpoint's certificate; retrying cannot help.
    return FailedPreconditionError(what + ": " + response.curl_error);
  }
  if (response.status == 0) {
    return IOError(what + ": " + response.curl_error + tries);
  }
  const std::string code = XmlElement(response.body, "Code");
  const std::string message = XmlElement(response.body, "Message");
  const std::string detail = "HTTP " + std::to_string(response.status) +
                             (code.empty() ? "" : " " + code) +
                             (message.empty() ? "" : ": " + message) + tries;
  switch (response.status) {
    case 404:
      return NotFoundError(what + ": not found (" + detail + ")");
    case 403:
      return IOError(what + ": permission denied (" + detail + ")");
    case 412:
      return FailedPreconditionError(what + ": the object already exists (" + detail + ")");
    default:
      return IOError(what + ": " + detail);
  }
}

}  // namespace shardpoint::internal_objstore
