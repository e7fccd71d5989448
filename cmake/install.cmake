# `cmake --install`: the library, its public headers, the CLI, the HF rules,
# a CMake package (find_package(shardpoint) -> shardpoint::shardpoint) and a
# pkg-config file. Included from the top CMakeLists.txt after the targets exist.
#
# Private dependencies do not leak into the installed interface: nlohmann_json
# is header-only and used only inside the library; xxhash is a link-only
# dependency of the static archive, found again by shardpointConfig.cmake.
# Public ones (Threads, MPI when built with it) are found through
# find_dependency. libcurl and libcrypto (the S3 client) are link-only too,
# found again through find_dependency (their imported targets).

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shardpoint)
target_link_libraries(shardpoint INTERFACE $<INSTALL_INTERFACE:shardpoint::xxhash>)

install(TARGETS shardpoint EXPORT shardpointTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/shardpoint
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT shardpointTargets NAMESPACE shardpoint:: DESTINATION ${SP_CMAKE_DIR})

if(TARGET shardpoint_cli)
  install(TARGETS shardpoint_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/rules/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/shardpoint/rules FILES_MATCHING PATTERN "*.json")

# CMake package.
set(SP_WITH_MPI ${MPI_CXX_FOUND})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/shardpointConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/shardpointConfig.cmake
                              INSTALL_DESTINATION ${SP_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_DATADIR CMAKE_INSTALL_BINDIR)
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/shardpointConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/shardpointConfig.cmake
              ${PROJECT_BINARY_DIR}/shardpointConfigVersion.cmake
        DESTINATION ${SP_CMAKE_DIR})

# pkg-config (relocatable: paths relative to the .pc file). The archive is
# static, so its link dependencies go in Libs.
set(SP_PC_CFLAGS "")
set(SP_PC_LIBS "-lxxhash -lcurl -lcrypto -pthread")
if(MPI_CXX_FOUND)
  string(APPEND SP_PC_CFLAGS " -DSHARDPOINT_HAVE_MPI")
  foreach(dir ${MPI_CXX_INCLUDE_DIRS})
    string(APPEND SP_PC_CFLAGS " -I${dir}")
  endforeach()
  foreach(lib ${MPI_CXX_LIBRARIES})
    string(APPEND SP_PC_LIBS " ${lib}")
  endforeach()
endif()
file(RELATIVE_PATH SP_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" SP_PC_TO_PREFIX "${SP_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/shardpoint.pc.in ${PROJECT_BINARY_DIR}/shardpoint.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/shardpoint.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
