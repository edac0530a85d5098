# ctest: package_install_and_use (packaging/CMakeLists.txt says what it checks). Run with -P and
# BUILD_DIR, EXAMPLE_DIR, PKG_CONFIG_SOURCE, WORK_DIR, GENERATOR, CXX, COMPILER_LAUNCHER, LIBDIR
# and BUILD_CXX_FLAGS: the library's own CMAKE_CXX_FLAGS, empty in a plain build. A library built
# with sanitizers (make check-sanitize) needs its programs compiled and linked the same way, or the
# sanitizer's run-time library is not loaded first and the program stops at start.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}): ${ARGN}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
# The build is done already: install copies it.
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

set(launcher "")
if(COMPILER_LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()
run("configuring examples/cpp" ${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${WORK_DIR}/example -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} ${launcher} "-DCMAKE_CXX_FLAGS=${BUILD_CXX_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${BUILD_CXX_FLAGS}")
run("building examples/cpp" ${CMAKE_COMMAND} --build ${WORK_DIR}/example)
run("running examples/cpp" ${WORK_DIR}/example/residual_mlp ${WORK_DIR}/residual_mlp.safetensors)

find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs tessel OUTPUT_VARIABLE flags
                RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs tessel failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(build_flags UNIX_COMMAND "${BUILD_CXX_FLAGS}")
run("compiling with pkg-config's flags" ${COMPILER_LAUNCHER} ${CXX} -std=c++20 ${build_flags}
    ${PKG_CONFIG_SOURCE} ${flags} -o ${WORK_DIR}/pkg_config_check)
# pkg-config gives no run-time path (as distributions' .pc files do not); the loader is told.
run("running the pkg-config program"
    ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/${LIBDIR} ${WORK_DIR}/pkg_config_check)
file(REMOVE_RECURSE ${WORK_DIR})
