// Storage objects for per-call object-store settings
// (shardpoint/object_store.h): made from Python's storage_options, held by
// shared_ptr, and handed to the options of a call (SaveOptions.set_storage,
// LoadOptions.set_storage) or to the calls that take one directly.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "shardpoint/object_store.h"

namespace py = pybind11;

namespace shardpoint::python {

void RegisterStorage(py::module_& m) {
  py::class_<Storage, std::shared_ptr<Storage>>(m, "Storage");
  m.def(
      "object_store_storage",
      [](std::string endpoint, std::string region, std::string addressing, std::string profile,
         std::string access_key_id, std::string secret_access_key, std::string session_token,
         std::string ca_bundle, uint64_t part_size, int parts_in_flight, int max_connections) {
        ObjectStoreOptions o;
        o.endpoint = std::move(endpoint);
        o.region = std::move(region);
        o.addressing = std::move(addressing);
        o.profile = std::move(profile);
        o.access_key_id = std::move(access_key_id);
        o.secret_access_key = std::move(secret_access_key);
        o.session_token = std::move(session_token);
        o.ca_bundle = std::move(ca_bundle);
        o.part_size = part_size;
        o.parts_in_flight = parts_in_flight;
        o.max_connections = max_connections;
        return std::shared_ptr<Storage>(Unwrap(MakeObjectStoreStorage(o)));
      },
      py::arg("endpoint") = "", py::arg("region") = "", py::arg("addressing") = "",
      py::arg("profile") = "", py::arg("access_key_id") = "", py::arg("secret_access_key") = "",
      py::arg("session_token") = "", py::arg("ca_bundle") = "", py::arg("part_size") = 0,
      py::arg("parts_in_flight") = 0, py::arg("max_connections") = 0);
  // A whole file's bytes through a storage (None: the default, which also
  // dispatches s3:// paths): what Python needs of files it parses itself,
  // such as a plain DCP directory's .metadata.
  m.def(
      "read_file",
      [](const std::string& path, const std::optional<std::shared_ptr<Storage>>& storage) {
        Storage* s = storage ? storage->get() : DefaultStorage();
        std::string data;
        {
          py::gil_scoped_release release;
          data = Unwrap(s->ReadFileToString(path));
        }
        return py::bytes(data);
      },
      py::arg("path"), py::arg("storage") = std::nullopt);
}

}  // namespace shardpoint::python
