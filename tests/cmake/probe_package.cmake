# Configures hotloop against tests/cmake/stand_in_torch (the real LibTorch
# with an undefined target in torch_cpu's link interface, as the CUDA
# wheel's config has) and checks that configure passes and that the Gloo
# process group is probed as it is against the real package: a probe that
# hands try_compile Torch's targets fails here as it failed on the GPU
# machine. Arguments: SOURCE_DIR, WORK_DIR, TORCH_DIR, EXPECT_GLOO (yes/no),
# GENERATOR, CXX_COMPILER.
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}" -G "${GENERATOR}"
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_BUILD_TYPE=Release
    -DHOTLOOP_BUILD_TESTS=OFF -DHOTLOOP_BUILD_BENCH=OFF
    -DTorch_DIR=${SOURCE_DIR}/tests/cmake/stand_in_torch
    -DHOTLOOP_REAL_TORCH_DIR=${TORCH_DIR}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output
  TIMEOUT 240)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configure against the stand-in Torch package failed (${result}):\n${output}")
endif()
if(NOT output MATCHES "hotloop: Gloo process group: ${EXPECT_GLOO}")
  message(FATAL_ERROR "expected 'hotloop: Gloo process group: ${EXPECT_GLOO}' against the stand-in Torch package, as against the real one:\n${output}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
message(STATUS "configure against the stand-in Torch package: passed, Gloo process group: ${EXPECT_GLOO}")
