# The compress area's tests, in the one test binary.
target_sources(hotloop_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cli_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_pruning_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prune_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/qat_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantization_aware_training_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantized_gpt_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shrink_test.cpp
)
