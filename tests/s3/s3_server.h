// The test server of the object-store checks: reads the environment file
// tests/s3/radosgw.sh wrote into the server directory (argv[1]) into this
// process's environment. Returns false (the caller exits 77: skipped) when
// there is none, because the Ceph binaries are not installed.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace shardpoint::testing {

inline bool LoadS3ServerEnv(const std::string& dir) {
  std::ifstream in(dir + "/env");
  if (!in) {
    std::cerr << "skipped: no S3 test server at " << dir
              << " (tests/s3/radosgw.sh needs ceph-mon, ceph-osd, radosgw: scripts/setup.sh)\n";
    return false;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("export ", 0) == 0) line = line.substr(7);
    const size_t eq = line.find('=');
    if (eq != std::string::npos)
      ::setenv(line.substr(0, eq).c_str(), line.substr(eq + 1).c_str(), 1);
  }
  return true;
}

// The radosgw port from AWS_ENDPOINT_URL (http://127.0.0.1:PORT).
inline int S3ServerPort() {
  const std::string e = std::getenv("AWS_ENDPOINT_URL");
  return std::atoi(e.substr(e.rfind(':') + 1).c_str());
}

}  // namespace shardpoint::testing
