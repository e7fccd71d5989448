// S3Client's transport: the handle pool, one signed request on libcurl, and
// the retry loop.
//
// Retry policy: a transport failure curl reports as transient (connect
// refused or timed out, reset, nothing received, a stall below 1 KiB/s for
// stall_timeout_s) or a status of 500-599, 429 or 408 is retried after a
// delay drawn uniformly from [0, min(5 s, retry_base_ms * 2^attempt)] ("full
// jitter"), while attempts < max_attempts and the time since the first
// attempt plus the delay stays within retry_total_ms. Every request carries
// its whole body in memory, so a retry resends exactly the same bytes.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "src/objstore/crypto.h"
#include "src/objstore/s3_client.h"
#include "src/objstore/s3_request.h"
#include "src/objstore/sigv4.h"

namespace shardpoint::internal_objstore {

struct S3Client::State {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Handle>> idle;
  int created = 0;
  std::mt19937_64 rng;
  std::atomic<uint64_t> requests{0}, retries{0}, bytes_sent{0}, bytes_received{0};
  std::string scheme;    // "http" or "https"
  std::string hostport;  // "127.0.0.1:7480"
  bool virtual_hosted = false;
};

namespace {

constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

bool RetryableCurl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool RetryableStatus(long s) { return s >= 500 || s == 429 || s == 408; }

struct Sink {
  CURL* curl;
  S3Client::Response* response;
  char* dst;
  size_t cap;
  bool overflow = false;
};

size_t OnBody(char* p, size_t size, size_t n, void* user) {
  Sink* s = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  long code = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
  if (s->dst != nullptr && code / 100 == 2) {
    if (bytes > s->cap - s->response->dst_written) {
      s->overflow = true;
      return 0;  // aborts the transfer
    }
    std::copy(p, p + bytes, s->dst + s->response->dst_written);
    s->response->dst_written += bytes;
    return bytes;
  }
  if (s->response->body.size() + bytes > (size_t{64} << 20)) return 0;  // runaway error body
  s->response->body.append(p, bytes);
  return bytes;
}

size_t OnHeader(char* p, size_t size, size_t n, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  const std::string line(p, size * n);
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    const size_t b = value.find_first_not_of(" \t");
    const size_t e = value.find_last_not_of(" \t\r\n");
    (*headers)[name] = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  }
  return size * n;
}

struct Source {
  std::string_view data;
  size_t pos = 0;
};

size_t OnRead(char* p, size_t size, size_t n, void* user) {
  Source* s = static_cast<Source*>(user);
  const size_t k = std::min(size * n, s->data.size() - s->pos);
  std::copy(s->data.data() + s->pos, s->data.data() + s->pos + k, p);
  s->pos += k;
  return k;
}

}  // namespace

S3Client::S3Client(S3Options options) : options_(std::move(options)), state_(new State) {}

S3Client::~S3Client() {
  for (auto& h : state_->idle) curl_easy_cleanup(h->curl);
}

Result<std::unique_ptr<S3Client>> S3Client::Make(const S3Options& options) {
  static const CURLcode global = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global != CURLE_OK) return InternalError("curl_global_init failed");
  std::unique_ptr<S3Client> c(new S3Client(options));
  State& s = *c->state_;
  std::string endpoint = options.endpoint;
  if (endpoint.empty()) endpoint = "https://s3." + options.region + ".amazonaws.com";
  const size_t sep = endpoint.find("://");
  s.scheme = endpoint.substr(0, sep);
  s.hostport = endpoint.substr(sep + 3);
  if (s.hostport.empty() || s.hostport.find('/') != std::string::npos) {
    return InvalidArgumentError("S3 endpoint '" + endpoint + "' must be scheme://host[:port]");
  }
  if (!options.ca_bundle.empty() && ::access(options.ca_bundle.c_str(), R_OK) != 0) {
    return InvalidArgumentError(
        "S3 CA bundle '" + options.ca_bundle +
        "' (ca_bundle, AWS_CA_BUNDLE) cannot be read: " + std::strerror(errno));
  }
  s.virtual_hosted = options.addressing == S3Addressing::kVirtualHosted ||
                     (options.addressing == S3Addressing::kAuto && options.endpoint.empty());
  s.rng.seed(
      options.jitter_seed != 0
          ? options.jitter_seed
          : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return c;
}

S3ClientStats S3Client::stats() const {
  return {state_->requests.load(), state_->retries.load(), state_->bytes_sent.load(),
          state_->bytes_received.load()};
}

std::unique_ptr<S3Client::Handle> S3Client::Acquire() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(
      lock, [this] { return !state_->idle.empty() || state_->created < options_.max_connections; });
  if (!state_->idle.empty()) {
    std::unique_ptr<Handle> h = std::move(state_->idle.back());
    state_->idle.pop_back();
    return h;
  }
  ++state_->created;
  auto h = std::make_unique<Handle>();
  h->curl = curl_easy_init();
  return h;
}

void S3Client::Release(std::unique_ptr<Handle> handle) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->idle.push_back(std::move(handle));
  }
  state_->cv.notify_one();
}

Result<S3Client::Response> S3Client::Send(const Request& request) {
  const auto start = std::chrono::steady_clock::now();
  Response response;
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<Handle> handle = Acquire();
    if (handle->curl == nullptr) return InternalError("curl_easy_init failed");
    Result<Response> r = SendOnce(handle.get(), request);
    Release(std::move(handle));
    if (!r.ok()) return r.status();
    response = std::move(*r);
    response.attempts = attempt;
    state_->requests++;
    const bool retry =
        response.status == 0 ? RetryableCurl(response.curl) : RetryableStatus(response.status);
    if (!retry || attempt >= options_.max_attempts) return response;
    const double cap_ms = std::min(
        5000.0, options_.retry_base_ms * static_cast<double>(uint64_t{1} << std::min(attempt, 20)));
    double delay_ms;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      delay_ms = std::uniform_real_distribution<double>(0, cap_ms)(state_->rng);
    }
    const double elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (elapsed_ms + delay_ms > options_.retry_total_ms) return response;
    state_->retries++;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
  }
}

Result<S3Client::Response> S3Client::SendOnce(Handle* handle, const Request& request) {
  State& s = *state_;
  CURL* curl = handle->curl;
  curl_easy_reset(curl);  // keeps the open connection
  const std::string host = s.virtual_hosted ? request.bucket + "." + s.hostport : s.hostport;
  std::string path = s.virtual_hosted ? "/" : "/" + request.bucket;
  if (!request.key.empty()) path += (s.virtual_hosted ? "" : "/") + UriEncode(request.key, false);
  const std::string query = CanonicalQuery(request.query);
  const std::string url = s.scheme + "://" + host + path + (query.empty() ? "" : "?" + query);

  SigV4Request sig;
  sig.method = request.method;
  sig.encoded_path = path;
  sig.query = request.query;
  sig.headers = request.headers;
  sig.headers.emplace_back("host", host);
  sig.payload_sha256 = request.body.empty() ? kEmptySha256 : "UNSIGNED-PAYLOAD";
  sig.headers.emplace_back("x-amz-content-sha256", sig.payload_sha256);
  const SigV4Result signed_request =
      SignV4(sig, {options_.access_key_id, options_.secret_access_key, options_.session_token},
             options_.region, "s3", AmzDate(std::time(nullptr)));

  curl_slist* list = nullptr;
  auto add = [&list](const std::string& name, const std::string& value) {
    list = curl_slist_append(list, (name + ": " + value).c_str());
  };
  for (const auto& [name, value] : sig.headers) add(name, value);
  for (const auto& [name, value] : signed_request.add_headers) add(name, value);
  add("Authorization", signed_request.authorization);
  list = curl_slist_append(list, "Expect:");        // no 100-continue round trip
  list = curl_slist_append(list, "Content-Type:");  // none (curl adds one to POSTs)

  Response response;
  Sink sink{curl, &response, request.dst, request.dst_size};
  Source source{request.body};
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options_.stall_timeout_s));
  // Large socket reads and writes: a 16 MiB body in 32 reads, not 1024.
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L << 10);
  curl_easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, 1L << 20);
  // A private CA (S3Options::ca_bundle); else libcurl's default store. The
  // peer and host are always verified: an untrusted certificate is an error.
  if (!options_.ca_bundle.empty())
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_bundle.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response.headers);
  if (request.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, OnRead);
    curl_easy_setopt(curl, CURLOPT_READDATA, &source);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  response.curl = curl_easy_perform(curl);
  curl_slist_free_all(list);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  s.bytes_sent += source.pos;
  s.bytes_received += response.dst_written + response.body.size();
  if (sink.overflow) {
    return DataLossError(request.op + " " + S3Uri(request.bucket, request.key) +
                         ": the server sent more than the " + std::to_string(request.dst_size) +
                         " bytes asked for");
  }
  if (response.curl != CURLE_OK) {
    response.status = 0;
    response.curl_error = std::string(curl_easy_strerror(response.curl)) +
                          (error[0] != '\0' ? std::string(": ") + error : "");
    if (response.curl == CURLE_PEER_FAILED_VERIFICATION) {
      response.curl_error = "the TLS certificate of " + s.scheme + "://" + host +
                            " is not trusted (" + response.curl_error +
                            "); give the CA that signed it in AWS_CA_BUNDLE or the profile's "
                            "ca_bundle (ObjectStoreOptions::ca_bundle, the CLI's --ca-bundle, "
                            "Python's storage_options ca_bundle)";
    }
  }
  return response;
}

}  // namespace shardpoint::internal_objstore
