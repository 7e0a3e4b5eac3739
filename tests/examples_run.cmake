# Installs hotloop from BUILD_DIR into WORK_DIR/prefix, runs the installed
# CLI from there, then builds the programs of examples/ (SOURCE_DIR) against
# it with find_package(hotloop), with the build's GENERATOR and
# CXX_COMPILER, and runs them: the README's library example
# trains an epoch of Fashion-MNIST (DATA_ROOT), stream_regression fits a
# regressor on an IterableDataset's streams, and own_model trains,
# resumes, validates and reports a model and dataset it registers.
if(DEFINED ENV{HOTLOOP_FASHION_MNIST_ROOT})
  set(DATA_ROOT $ENV{HOTLOOP_FASHION_MNIST_ROOT})
else()
  set(DATA_ROOT /usr/share/datasets/fashion-mnist)
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/runs)

# Runs a command in WORK_DIR; fails the test unless it exits with
# EXPECT_CODE (0 when not given) and its output matches every regex after
# MATCHES.
function(run_step)
  cmake_parse_arguments(STEP "" "EXPECT_CODE" "COMMAND;MATCHES" ${ARGN})
  if(NOT DEFINED STEP_EXPECT_CODE)
    set(STEP_EXPECT_CODE 0)
  endif()
  execute_process(COMMAND ${STEP_COMMAND} WORKING_DIRECTORY ${WORK_DIR}
    RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code STREQUAL STEP_EXPECT_CODE)
    message(FATAL_ERROR "exit ${code}, expected ${STEP_EXPECT_CODE}: "
      "${STEP_COMMAND}\n${out}${err}")
  endif()
  foreach(regex IN LISTS STEP_MATCHES)
    if(NOT "${out}${err}" MATCHES "${regex}")
      message(FATAL_ERROR "no match for '${regex}' in the output of "
        "${STEP_COMMAND}:\n${out}${err}")
    endif()
  endforeach()
  message(STATUS "ok: ${STEP_COMMAND}")
endfunction()

function(expect_file path)
  if(NOT EXISTS ${WORK_DIR}/${path})
    message(FATAL_ERROR "${path} was not written")
  endif()
endfunction()

run_step(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# The installed CLI loads its library from the prefix (no LD_LIBRARY_PATH).
run_step(COMMAND ${WORK_DIR}/prefix/bin/hotloop --version
  MATCHES "^hotloop [0-9]+\\.[0-9]+\\.[0-9]+ \\(LibTorch ")
run_step(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build
  -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
  -DTorch_DIR=${TORCH_DIR})
run_step(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build)

# The library example, one epoch: the CNN reaches > 80% after one (82.8%
# measured), and the default loggers fill the run folder.
run_step(COMMAND ${WORK_DIR}/build/fit_fashion_mnist ${DATA_ROOT} 1
  MATCHES "val_acc 0\\.(8|9)[0-9]*, run folder runs/fashion_mnist/version_0")
expect_file(runs/fashion_mnist/version_0/metrics.csv)
expect_file(runs/fashion_mnist/version_0/checkpoints/last.ckpt)
file(GLOB events ${WORK_DIR}/runs/fashion_mnist/version_0/events.out.tfevents.*)
if(NOT events)
  message(FATAL_ERROR "the library fit wrote no TensorBoard event file")
endif()
# Bad arguments are named with a non-zero exit, not an abort.
run_step(COMMAND ${WORK_DIR}/build/fit_fashion_mnist ${DATA_ROOT} 1x
  EXPECT_CODE 2 MATCHES "EPOCHS must be a whole number >= 1, got '1x'")
run_step(COMMAND ${WORK_DIR}/build/fit_fashion_mnist ${WORK_DIR}/no-such-data 1
  EXPECT_CODE 1 MATCHES "fit_fashion_mnist: .*no-such-data")

# Training on a stream: two workers' streams of a simulated sensor, whose
# value (standard deviation 1.85) it learns to within 0.2.
run_step(COMMAND ${WORK_DIR}/build/stream_regression 5
  MATCHES "val_rmse 0\\.(0|1)")
run_step(COMMAND ${WORK_DIR}/build/stream_regression 5x EXPECT_CODE 2
  MATCHES "EPOCHS must be a whole number >= 1, got '5x'")

# A registered model and dataset behave as the built-in ones.
set(own ${WORK_DIR}/build/own_model)
set(flags --model.name=tiny_net --model.width=32 --model.num_classes=2
  --data.dataset=stripes --data.synthetic_size=1000 --data.crop_padding=0
  --data.horizontal_flip=false --data.mean=[0.5] --data.std=[0.5]
  --trainer.name=own --trainer.enable_progress_bar=false)
run_step(COMMAND ${own} fit --help
  MATCHES " model for tiny_net:\n  --model.width=64 +hidden units"
          "tiny_net: a one-hidden-layer perceptron"
          "stripes: horizontal or vertical stripes"
          "--data.stripes_seed=1")
run_step(COMMAND ${own} fit ${flags} --model.width=0 EXPECT_CODE 2
  MATCHES "model.width")
run_step(COMMAND ${own} fit ${flags} --model.name=tiny_nt EXPECT_CODE 2
  MATCHES "tiny_net")
run_step(COMMAND ${own} fit ${flags} --trainer.max_epochs=2
  MATCHES "done: 2 epochs" "val_acc 1\\.0000")
expect_file(runs/own/version_0/config.yaml)
expect_file(runs/own/version_0/metrics.csv)
run_step(COMMAND ${own} fit ${flags} --trainer.max_epochs=3 --ckpt_path last
  MATCHES "resumed from .*last.ckpt" "done: 3 epochs")
run_step(COMMAND ${own} validate ${flags} --ckpt_path last
  MATCHES "val_acc +1\\.0000")
run_step(COMMAND ${own} predict ${flags} --ckpt_path last
  --output ${WORK_DIR}/predictions.csv
  MATCHES "500 rows written")
run_step(COMMAND ${own} report runs/own/version_0 MATCHES "report.html")
expect_file(runs/own/version_0/report.html)
