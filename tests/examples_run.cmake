# Installs hotloop from BUILD_DIR into WORK_DIR/prefix, runs the installed
# CLI from there, then configures, builds and runs the consumer project in
# SOURCE_DIR against it.
file(REMOVE_RECURSE ${WORK_DIR})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "step failed (${code}): ${ARGN}")
  endif()
endfunction()
run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# The installed CLI loads its library from the prefix (no LD_LIBRARY_PATH).
execute_process(COMMAND ${WORK_DIR}/prefix/bin/hotloop --version
  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0 OR NOT out MATCHES "^hotloop [0-9]+\\.[0-9]+\\.[0-9]+ \\(LibTorch ")
  message(FATAL_ERROR "installed hotloop --version failed (${code}): ${out}${err}")
endif()
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DTorch_DIR=${TORCH_DIR})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step(${WORK_DIR}/build/consumer)
