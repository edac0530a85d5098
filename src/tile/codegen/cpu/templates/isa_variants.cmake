# Compiler flags of the CPU ISA variants of the gemm templates (tile_gemm.h chooses its code from
# the macros these flags define). Included by src/tile/CMakeLists.txt. The flags are kept in
# TESSEL_CPU_ISA_FLAGS_<isa> so that other code compiled per variant (the tile compiler's
# ahead-of-time kernels) uses the same ones; reference_gemm.cpp checks the matching CPU features.
set(TESSEL_CPU_ISA_FLAGS_avx512bf16
    -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mavx2 -mfma -mf16c
    CACHE INTERNAL "flags of the avx512bf16 CPU variant")
set(TESSEL_CPU_ISA_FLAGS_avx512 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c
    CACHE INTERNAL "flags of the avx512 CPU variant")
set(TESSEL_CPU_ISA_FLAGS_avx2 -mavx2 -mfma -mf16c CACHE INTERNAL "flags of the avx2 CPU variant")

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  foreach(isa avx512bf16 avx512 avx2)
    set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/reference_gemm_${isa}.cpp
                                TARGET_DIRECTORY tessel
                                PROPERTIES COMPILE_OPTIONS "${TESSEL_CPU_ISA_FLAGS_${isa}}")
  endforeach()
endif()
