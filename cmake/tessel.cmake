# Helpers shared by every layer's CMakeLists.txt.
#
#   tessel_layer(NAME [EXCLUDE dir...])
#                       adds every *.cpp in the calling folder and its sub-folders to libtessel,
#                       except *_test.cpp and *_bench.cpp; the *_test.cpp files become one
#                       GoogleTest binary, tessel_NAME_tests, registered with ctest. Sub-folders
#                       named after EXCLUDE hold code that the layer builds into targets of its
#                       own (a plug-in module loaded at run time, a helper program for tests).
#                       The test binary is built only with TESSEL_BUILD_TESTS.

function(tessel_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(TESSEL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

function(tessel_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 layer "" "" "EXCLUDE")
  file(GLOB_RECURSE all CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  foreach(dir ${layer_EXCLUDE})
    list(FILTER all EXCLUDE REGEX "^${CMAKE_CURRENT_SOURCE_DIR}/${dir}/")
  endforeach()
  set(sources "")
  set(tests "")
  foreach(f ${all})
    if(f MATCHES "_test\\.cpp$")
      list(APPEND tests ${f})
    elseif(NOT f MATCHES "_bench\\.cpp$")
      list(APPEND sources ${f})
    endif()
  endforeach()
  target_sources(tessel PRIVATE ${sources})
  if(tests AND TESSEL_BUILD_TESTS)
    set(bin tessel_${name}_tests)
    add_executable(${bin} ${tests})
    target_link_libraries(${bin} PRIVATE tessel GTest::gtest GTest::gtest_main)
    tessel_warnings(${bin})
    gtest_discover_tests(${bin} DISCOVERY_TIMEOUT 60
                         PROPERTIES ENVIRONMENT "TESSEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  endif()
endfunction()

# tessel_generated_source(NAME OUTPUT file.cpp SCRIPT script.cmake COMMENT text FILES inputs...)
# A source of libtessel written at build time by a CMake script from FILES (given to the script as
# FILES, '|'-separated, with OUT and ROOT = src/), rewritten when an input or the script changes.
# libtessel is defined at the top, so the custom target NAME owns the step.
function(tessel_generated_source name)
  cmake_parse_arguments(G "" "OUTPUT;SCRIPT;COMMENT" "FILES" ${ARGN})
  string(REPLACE ";" "|" files_text "${G_FILES}")
  add_custom_command(
    OUTPUT ${G_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUT=${G_OUTPUT} -DROOT=${PROJECT_SOURCE_DIR}/src
            "-DFILES=${files_text}" -P ${G_SCRIPT}
    DEPENDS ${G_FILES} ${G_SCRIPT}
    COMMENT "${G_COMMENT}"
    VERBATIM)
  target_sources(tessel PRIVATE ${G_OUTPUT})
  add_custom_target(${name} DEPENDS ${G_OUTPUT})
  add_dependencies(tessel ${name})
endfunction()
