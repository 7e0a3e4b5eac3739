# hotloop's CUDA kernels (src/models/*.cu) compiled as C++ and run on the
# CPU emulator here, in the one test binary: an object library of their
# own, because their sources find this folder's cuda_runtime.h and CUDA
# headers of ATen and c10 before LibTorch's. Where the kernels are built
# for a GPU (HOTLOOP_HAS_CUDA_KERNELS) their CUDA tests run them instead.
# Nor against a LibTorch with CUDA (its ATen/cuda functions would meet
# the stand-ins of the same names here); the emulator's fibers (ucontext)
# are not built under a sanitizer.
if(NOT TARGET torch_cuda AND NOT HOTLOOP_HAS_CUDA_KERNELS
   AND NOT HOTLOOP_SANITIZE)
  add_library(hotloop_cuda_emulation_tests OBJECT
    ${CMAKE_CURRENT_LIST_DIR}/emulator.cpp
    ${CMAKE_CURRENT_LIST_DIR}/emulator_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/add_layer_norm_kernels_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/bias_gradient_kernels_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/softmax_cross_entropy_kernels_test.cpp)
  target_include_directories(hotloop_cuda_emulation_tests BEFORE PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/include)
  target_include_directories(hotloop_cuda_emulation_tests PRIVATE
    ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(hotloop_cuda_emulation_tests PRIVATE
    ${TORCH_LIBRARIES} GTest::gtest)
  target_compile_options(hotloop_cuda_emulation_tests PRIVATE
    -Wall -Wextra -Wno-unused-parameter
    -Wno-unknown-pragmas) # the kernels' #pragma unroll
  target_sources(hotloop_tests PRIVATE
    $<TARGET_OBJECTS:hotloop_cuda_emulation_tests>)
  # The same tests under valgrind's memcheck (scripts/sanitize.sh kernels):
  # a kernel's read or write past a tensor's bytes fails it. memcheck.sh
  # skips it where valgrind cannot run a system library's start-up on this
  # CPU (an instruction a virtual machine's cpuid hides).
  find_program(HOTLOOP_VALGRIND valgrind)
  if(HOTLOOP_VALGRIND)
    set(memcheck_log ${CMAKE_CURRENT_BINARY_DIR}/cuda_kernels_memcheck.log)
    add_test(NAME cuda_kernels_memcheck
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/memcheck.sh ${memcheck_log}
        ${HOTLOOP_VALGRIND} --log-file=${memcheck_log} --error-exitcode=9
        --quiet --max-stackframe=2000000000
        --suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/valgrind.supp
        $<TARGET_FILE:hotloop_tests>
        --gtest_filter=CudaEmulation.*:AddLayerNormKernels.*:BiasGradientKernel.*:SoftmaxCrossEntropyKernel.*)
    set_tests_properties(cuda_kernels_memcheck PROPERTIES
      TIMEOUT 600 SKIP_RETURN_CODE 77)
  else()
    message(STATUS "hotloop: no valgrind: the CUDA kernels' emulated tests run without memcheck (apt-get install valgrind)")
  endif()
endif()
