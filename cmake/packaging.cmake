# CPack: a Debian package of what `cmake --install` installs (library, headers,
# CMake package, pkg-config file, CLI, HF rules), installed under /usr.
#   cpack --config <build>/CPackConfig.cmake -G DEB   ->  shardpoint_<version>_<arch>.deb
# Depends: the shared libraries the CLI links (dpkg-shlibdeps) plus the
# development packages a consumer of the static library and its headers needs.

set(CPACK_PACKAGE_NAME shardpoint)
set(CPACK_PACKAGE_VENDOR shardpoint)
set(CPACK_PACKAGE_CONTACT "shardpoint maintainers <shardpoint@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "distributed checkpointing of sharded training state (library, headers, CLI)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libshardpoint.a links libcurl and libcrypto (the S3 client, src/objstore).
set(SP_DEB_DEPENDS "libxxhash-dev, libcurl4-openssl-dev, libssl-dev")
if(MPI_CXX_FOUND)
  # mpi_comm.h includes <mpi.h>; the archive's MPI objects link against it.
  if(MPI_CXX_LIBRARIES MATCHES "mpich")
    string(APPEND SP_DEB_DEPENDS ", libmpich-dev")
  else()
    string(APPEND SP_DEB_DEPENDS ", libopenmpi-dev")
  endif()
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS ${SP_DEB_DEPENDS})

include(CPack)
