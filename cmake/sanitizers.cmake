# Sanitizer builds beyond SHARDPOINT_SANITIZE (ASan + UBSan, in the top file).
#
#   SHARDPOINT_TSAN=ON   ThreadSanitizer for everything built (scripts/test.sh
#                        builds only shardpoint_tests this way and runs the
#                        threaded tests; see docs/reliability.md).
#   SHARDPOINT_FUZZ=ON   libFuzzer targets (clang only): every object gets
#                        coverage instrumentation plus ASan + UBSan, and the
#                        targets of fuzz/ link the libFuzzer driver. Without it
#                        the same targets are built with a replay main and run
#                        over their committed corpus by ctest (fuzz/README.md).
option(SHARDPOINT_TSAN "Build with ThreadSanitizer" OFF)
option(SHARDPOINT_FUZZ "Build the fuzz targets with libFuzzer (clang)" OFF)

if(SHARDPOINT_TSAN)
  if(SHARDPOINT_SANITIZE)
    message(FATAL_ERROR "SHARDPOINT_TSAN and SHARDPOINT_SANITIZE cannot be combined")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

if(SHARDPOINT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SHARDPOINT_FUZZ needs clang (-DCMAKE_CXX_COMPILER=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
